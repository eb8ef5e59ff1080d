// pipefill: chunked pipeline-parallel prefill of very long prompts.
//
// `run` is the story of the program and reads top to bottom: MPI init -> options ->
// prepare (every collective up to the plan) -> the loop -> report -> finalize
// (cli/run_steps.hpp). Every setup step that can fail on bad input is a checked_step: all
// ranks learn of a failure on any rank, rank 0 prints one `error:` line, and every rank exits
// with status 2.
#include <mpi.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "cli/commands.hpp"              // defines: profile, plan, simulate, advise, make-model, make-prompts
#include "cli/options.hpp"               // defines: RunOptions and its option table
#include "cli/run_steps.hpp"             // defines: prepare_run, run_loop, report_run
#include "compute/cpu/blas_kernels.hpp"  // defines: choose_blas_kernels (OpenBLAS kernels by CPU features)
#include "errors.hpp"                    // defines: UserError, kExitUserError, fail_library_call

using namespace pf;

// Set by SIGTERM (Slurm's time limit, scancel) or SIGUSR1 (what mpirun forwards): rank 0
// then stops issuing prompts, finishes those in flight, saves, and exits with kExitStopped.
static volatile int g_stop_requested = 0;
static void request_stop(int) {
  g_stop_requested = 1;
}

// Three collective steps (cli/run_steps.hpp), each on every rank in this order.
static int run_command(int argc, char** argv) {
  cli::RunOptions options;
  if (!cli::parse_run(argc, argv, options)) return 0;  // --help; every rank parsed the same argv
  // Options -> topology -> model -> prompts -> backend and weights -> outputs -> plan -> transport.
  const std::unique_ptr<cli::PreparedRun> run = cli::prepare_run(options);
  if (!run) return 0;  // OUTPUT is already complete: nothing to resume
  // One time base, every rank walks the plan; the KV export and store finished.
  const std::unique_ptr<cli::FinishedLoop> loop = cli::run_loop(*run, &g_stop_requested);
  // Gathers, rank 0 writes the output, the trace and the summary; the exit status.
  return cli::report_run(*run, *loop);
}

int main(int argc, char** argv) {
  const char* command = argc > 1 ? argv[1] : "";
  if (std::strcmp(command, "run") == 0) {
    // First thing: a stop that arrives during start-up (choosing the kernels, MPI_Init, loading
    // the weights) is remembered, and the run ends with nothing computed (exit 75) instead of
    // dying of the signal's default action.
    std::signal(SIGTERM, request_stop);
    std::signal(SIGUSR1, request_stop);
  }
  // Before MPI and threads: OpenBLAS's kernels by this CPU's features, not its model. (A stop
  // signal held across its re-execution is delivered there, to the handlers above.)
  pf::cpu::choose_blas_kernels(argv);
  // run and profile are SPMD (MPI); the other commands are single-process tools.
  const bool is_run = std::strcmp(command, "run") == 0 || std::strcmp(command, "profile") == 0;
  if (!is_run) unwind_library_failures();  // one process: its partial files go on a failure
  int rank = 0;
  if (is_run) {
    MPI_CHECK(MPI_Init(&argc, &argv));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  }
  int status = 0;
  try {
    if (std::strcmp(command, "run") == 0) {
      status = run_command(argc - 1, argv + 1);
    } else if (std::strcmp(command, "profile") == 0) {
      status = cli::profile_command(argc - 1, argv + 1);
    } else if (std::strcmp(command, "make-model") == 0) {
      status = cli::make_model_command(argc - 1, argv + 1);
    } else if (std::strcmp(command, "make-prompts") == 0) {
      status = cli::make_prompts_command(argc - 1, argv + 1);
    } else if (std::strcmp(command, "simulate") == 0) {
      status = cli::simulate_command(argc - 1, argv + 1);
    } else if (std::strcmp(command, "advise") == 0) {
      status = cli::advise_command(argc - 1, argv + 1);
    } else if (std::strcmp(command, "plan") == 0) {
      status = cli::plan_command(argc - 1, argv + 1);
    } else if (!*command || std::strcmp(command, "--help") == 0 || std::strcmp(command, "-h") == 0) {
      std::printf("%s", cli::usage().c_str());
    } else if (std::strcmp(command, "--version") == 0) {
      std::printf("pipefill %s\n", PIPEFILL_VERSION);
    } else {
      throw UserError(std::string("unknown command \"") + command + "\"\n" + cli::usage());
    }
  } catch (const UserError& e) {
    if (rank == 0) std::fprintf(stderr, "error: %s\n", e.what());
    status = kExitUserError;
  } catch (const LibraryFailure& e) {  // a command without MPI, its partial files removed
    std::fprintf(stderr, "%s\n", e.what());
    status = kExitLibraryFailure;
  } catch (const std::exception& e) {  // a bug or a system fault: say where, take the job down
    if (!is_run) {
      std::fprintf(stderr, "fatal: pipefill %s failed (%s)\n", command, e.what());
      status = kExitLibraryFailure;
    } else {
      fail_library_call("pipefill", command, e.what(), __FILE__, __LINE__);
    }
  }
  if (is_run) MPI_Finalize();
  return status;
}
