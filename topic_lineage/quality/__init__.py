"""The Great Expectations quality gate: suites, custom expectations, write-audit-publish checks.

Nothing here imports Great Expectations or Spark at package import time.
"""
