"""The compiler side: finding CUDA tools, the one content-hashed ``nvcc -cubin`` cache (cubin),
nvcc / ptxas resource reports, SASS reading and the census of other people's binaries, Nsight
Compute profiles, and the child-process guards that leave no orphan behind."""
