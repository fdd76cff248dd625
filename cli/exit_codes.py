"""The exit codes of `stream-osc`, one per outcome a script or scheduler must tell apart."""
from __future__ import annotations

from enum import IntEnum, unique

from throttle.load import CriticalLoad
from core.source_check import SourceChanged
from core.swap_preconditions import UnsafeServerSetting
from core.target_identity import TargetMismatch
from cutover.validate import ValidationFailed
from migration.coordination import MigrationStopped


@unique
class ExitCode(IntEnum):
    """What the process's exit status means (documented in the README and `stream-osc --help`)."""

    DONE = 0            # the command did what it was asked (migrate: swapped)
    INTERNAL = 1        # an unexpected error (a bug): the traceback is printed
    REFUSED = 2         # bad input or an unmet precondition: nothing was changed (also usage errors)
    STOPPED = 3         # the migration stopped before its end and kept its state: `stream-osc resume` continues
    CRITICAL_LOAD = 4   # --critical-load was reached: stopped, resumable like 3
    FAILED = 5          # stopped, cannot continue (aborted, table altered or replaced, binlog purged): `abort`, again
    ALREADY_SWAPPED = 6  # `abort` found the tables swapped: it finished the migration instead (new schema in place)
    WRONG_TARGET = 7    # a move's target server is not the one init wrote to: nothing written there; state kept
    INTERRUPTED = 130   # Ctrl-C


EPILOG = """exit codes:
  0    done (migrate: tables swapped)
  1    internal error (a bug; the traceback is printed)
  2    refused: bad input or an unmet precondition, nothing was changed
  3    stopped before the end, state kept: `stream-osc resume` continues
       (status: the migration stopped or failed)
  4    stopped because --critical-load was reached; resumable like 3
  5    failed: stopped and cannot continue (aborted, the table altered or
       replaced meanwhile, or its binlog position purged): `stream-osc abort`
       and start again
  6    abort: the tables were found already swapped; the migration was finished
       instead (the new schema is in place, the original kept as <table>_osc_old)
  7    wrong target: a move's target server is not the one init wrote to
       (another server, or a replica or failed-over copy of it): nothing was
       written there and the state is kept; point STREAM_OSC_TARGET_DSN at the
       target and run the command again, or accept a failed-over target
       (`stream-osc accept-target`, docs/move.md)
  130  interrupted (Ctrl-C)"""


def exit_code_for(exc: BaseException) -> ExitCode:
    """The exit code of a user-facing error."""
    if isinstance(exc, CriticalLoad):
        return ExitCode.CRITICAL_LOAD
    if isinstance(exc, MigrationStopped):
        return ExitCode.STOPPED if exc.resumable else ExitCode.FAILED
    if isinstance(exc, TargetMismatch):
        return ExitCode.WRONG_TARGET
    if isinstance(exc, SourceChanged):
        return ExitCode.FAILED    # the new table no longer means the ALTER of the table as it is now
    if isinstance(exc, UnsafeServerSetting):
        return ExitCode.STOPPED   # the runner says this as MigrationStopped, init as PreflightError: should one escape
    if isinstance(exc, ValidationFailed):
        return ExitCode.STOPPED   # rows kept differing: resume validates again
    return ExitCode.REFUSED   # incl. a constraint the data breaks: fails as the ALTER would, nothing left
