#!/usr/bin/env bash
# mpirun as the tests use it: MPIRUN ARGS... runs `MPIRUN <the settings below> ARGS...`.
#   --oversubscribe          more ranks than cores (CI has two cores; a comparison's ranks also start runs)
#   --bind-to none           ranks (and the runs and threads they start) are not pinned to one core each
#   --mca btl self,vader     this machine's shared memory only: no network interfaces probed
#   btl_vader_single_copy_mechanism none: containers often forbid the cross-process reads (CMA) vader
#                            uses for large messages
# Root may run it (CI does) through OpenMPI's two variables, set here for the tests alone.
mpirun=$1
shift
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec "$mpirun" --oversubscribe --bind-to none --mca btl self,vader --mca btl_vader_single_copy_mechanism none "$@"
