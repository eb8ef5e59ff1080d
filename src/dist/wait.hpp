// Waiting on MPI requests without burning a core. Open MPI's MPI_Wait busy-spins; on an
// oversubscribed node a spinning rank slowed a computing one 3.7x (ENVIRONMENT.md). We
// poll MPI_Test a few times, then sleep between polls, the naps growing from 50 us to 1 ms
// so that a long wait costs little CPU even with 16-32 ranks on 2 cores.
#pragma once

#include <mpi.h>

namespace pf::dist {

void wait_polling(MPI_Request* request, MPI_Status* status = MPI_STATUS_IGNORE);

}  // namespace pf::dist
