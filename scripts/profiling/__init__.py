"""Profiling helpers behind scripts/profile_attention.py and scripts/make_samples.py.

Kept out of the `tracekit` package on purpose: tracekit only reads traces and
must never import torch; everything that *produces* traces lives here.
The package and file names avoid the words "attention"/"attn" because
with_stack/with_modules copy file and module names into the trace, and
tracekit finds blocks by the outermost name matching /attention|attn/i.
"""
