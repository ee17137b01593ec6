"""Pure-Python stand-in for simple_switch_grpc that executes the pipeline of starnet.p4."""
