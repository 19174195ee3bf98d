"""The auditor's path: a standard battery of attacks on the user's own data (``textfree audit``, docs/audit.md).

:class:`AuditConfig` holds what one audit runs (checked at the boundary, errors naming the flag); :func:`run_audit`
runs its cells (:mod:`.cells`) with the experiment runner and writes the report (:mod:`.report`, :mod:`.figures`)
from the result files (:mod:`.verdicts`) and ``audit.json``.
"""

from .config import AuditConfig, AuditError
from .run import run_audit

__all__ = ["AuditConfig", "AuditError", "run_audit"]
