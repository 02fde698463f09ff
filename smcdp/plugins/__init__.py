"""How protocols plug into a party process.

A plug-in turns a session's configured inputs into the arrays a protocol's
roles take, runs the role, and turns its outputs into files and a JSON
result.  The runtime (``smcdp.runtime``) knows protocols only through this
package; protocols (``smcdp.protocols``) know nothing of it.
"""
