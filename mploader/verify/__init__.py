"""``mploader verify``: is this data dir healthy?  A read-only audit of every byte, beyond what Kafka checks.

* :mod:`.run`        :func:`verify_logs`: list, audit every segment on the load's engine, check each
  partition, say what a load would do now (docs/verify-output.md)
* :mod:`.partition`  the checks across a partition's segments and files
* :mod:`.report`     what it reports, and the JSON document (:data:`SCHEMA_VERSION`)

The per-segment audit itself is Phase 1 work, pure and picklable: :mod:`mploader.scan.audit`.
"""

from mploader.verify.report import SCHEMA_VERSION, DataDirReport, Finding, PartitionReport, VerifyReport
from mploader.verify.run import verify_logs

__all__ = ["SCHEMA_VERSION", "DataDirReport", "Finding", "PartitionReport", "VerifyReport", "verify_logs"]
