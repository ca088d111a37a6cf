"""Facts that need no GPU: real model shapes, the spec sheet of the GPUs, roofline arithmetic."""
