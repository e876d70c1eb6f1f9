"""qcore's own compatibility matrix: the conformance kit (``qcore.conformance``) run on
every built-in backend over this repository's whole suite, writing
``matrix/results/*.json`` and ``docs/compatibility.md``. Not part of the package.
"""
