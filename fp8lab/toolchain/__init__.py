"""The compiler side: finding CUDA tools, nvcc / ptxas resource reports, SASS reading and censuses,
the compile grid, Nsight Compute profiles."""
