"""Hints: what to do next, read from an attribution (docs/attribution.md, "Hints").

Three rooms, in the order a trace meets them:

* :mod:`.facts`: the kernel rows gathered once per trace while kernels are placed in blocks
  (:func:`collect_facts`, a pipeline stage's work);
* :mod:`.rules`: the ordered rule table and :func:`evaluate`, run on the attribution's block kinds;
* :mod:`.advice`: the vendor-specific advice rows a rule's message may quote.

Hint, GroupFacts, HintFacts and merge_facts (the data) live in :mod:`tracekit.results.hints`.
"""

from .advice import ADVICE, Advice, AdviceTopic, advise
from .facts import HintTag, collect_facts
from .rules import HINT_RULES, Group, HintRule, evaluate

__all__ = ["ADVICE", "HINT_RULES", "Advice", "AdviceTopic", "Group", "HintRule", "HintTag", "advise", "collect_facts",
           "evaluate"]
