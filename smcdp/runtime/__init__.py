"""The party process: sessions, the operator's client, local clusters.

``smcdp.runtime`` joins the transport (``smcdp.net``) and the protocol
plug-ins (``smcdp.plugins``); the CLI (``smcdp.cli``) sits above it.
"""
