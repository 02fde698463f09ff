"""Generated protobuf code (``make proto`` regenerates it from protos/)."""
