// A setup step that may fail with a user error on any subset of ranks. Every rank runs
// `step`, then all agree (dist/error_agreement.hpp); if anyone failed, every rank throws
// the same UserError, so the job ends cleanly with status 2 and nobody hangs.
#pragma once

#include <mpi.h>

#include <optional>
#include <string>

#include "dist/error_agreement.hpp"
#include "errors.hpp"

namespace pf::dist {

template <typename Step>
void checked_step(MPI_Comm comm, Step&& step) {
  std::optional<std::string> local_error;
  try {
    step();
  } catch (const UserError& e) {
    local_error = e.what();
  }
  if (auto agreed = agree_on_errors(local_error, comm)) throw UserError(*agreed);
}

}  // namespace pf::dist
