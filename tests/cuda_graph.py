"""Run a test's launches eagerly or as a CUDA graph (the GPU tests of programmatic dependent launch)."""


def run_eager_or_in_graph(body, graph: bool, poison) -> None:
    """body() once, eagerly, or captured into a CUDA graph and replayed once. Before the replay
    poison() overwrites the outputs, so whatever the test then reads was written by the replay.
    Synchronises before and after."""
    import torch

    torch.cuda.synchronize()
    if graph:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            body()
        poison()
        g.replay()
    else:
        body()
    torch.cuda.synchronize()
