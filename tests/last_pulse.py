"""Pulses between a coordinator and two groups of one rank, then the search's end: run under
`mpiexec -n 3`. Each rank then says on stdout how many pulses are still unreceived for it (after a
barrier, so every rank has finished its last word); the end must leave none for MPI_Finalize."""
import time

from mpi4py import MPI

from mpiopt import transport

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
plan = transport.plan_groups(comm.Get_size(), 1)
EVERY_S = 0.02  # many pulses in flight at the end
if rank == 0:
    pulse = transport.Pulse(comm, sorted(transport.pulsing_ranks(plan)), every_s=EVERY_S).start()
    link = transport.MPITransport(comm, plan)
    assert link.recv_message(timeout=0.5) is None  # pulses only: taken in, nothing to serve
    link.shutdown()
else:
    pulse = transport.Pulse(comm, [0], watch=0, silent_s=30.0, every_s=EVERY_S).start()
    time.sleep(0.3)
    transport.recv_bytes(comm, 0, transport.TAG_STOP)
    time.sleep(0.3)  # the coordinator pulses on meanwhile
pulse.stop()
comm.Barrier()
left = 0
status = MPI.Status()
while comm.Iprobe(source=MPI.ANY_SOURCE, tag=transport.TAG_PULSE, status=status):
    comm.Recv([bytearray(status.Get_count(MPI.BYTE)), MPI.BYTE], source=status.Get_source(), tag=transport.TAG_PULSE)
    left += 1
print(f"rank {rank}: {left} pulses left", flush=True)
