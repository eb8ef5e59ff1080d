// The single-process subcommands (run lives in main.cpp: it is the program's story).
// Each returns the process exit status and throws UserError for bad input.
#pragma once

namespace pf::cli {

int make_model_command(int argc, char** argv);
int make_prompts_command(int argc, char** argv);
int plan_command(int argc, char** argv);
int profile_command(int argc, char** argv);  // SPMD: runs under mpirun like run
int simulate_command(int argc, char** argv);
int advise_command(int argc, char** argv);

}  // namespace pf::cli
