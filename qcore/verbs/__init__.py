"""The on-demand operations, one module per subject.

Each is what a verb of ``Boss`` (or the command line, or the dashboard) runs when it is
called: a set of ``f(ctx, ...)`` functions on a :class:`~qcore.context.Context`.

A subject has the same module name here and in :mod:`qcore.sql`, which builds its
statements: ``verbs/queues.py`` runs ``sql/queues.py``, ``verbs/jobs/claim.py`` runs
``sql/jobs/claim.py``, and so on. The background loops (:mod:`qcore.services`,
:mod:`qcore.worker`) sit above and call down into these; nothing here imports them.
"""
