"""The operator's on-demand verbs under their old path.

Drift detection, reindex and async-migration commands moved to :mod:`qcore.verbs`
(``drift``, ``reindex``, ``bam``); :mod:`qcore.ops.drift`, the documented one, still
imports from here.
"""
