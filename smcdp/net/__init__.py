"""Transport: Channel interface, in-memory network, gRPC with mutual TLS.

Knows nothing of protocols.
"""
