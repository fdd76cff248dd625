"""The algorithm's order as a table: every stage is reachable from init, done from every stage, and nothing else."""
from __future__ import annotations

import pytest

from core.stages import TRANSITIONS, IllegalTransition, Stage, require_transition


def test_the_algorithm_runs_init_copy_apply_validate_cutover_cleanup_done():
    for current, stage in zip((Stage.INIT, Stage.COPY, Stage.APPLY, Stage.VALIDATE, Stage.CUTOVER, Stage.CLEANUP),
                              (Stage.COPY, Stage.APPLY, Stage.VALIDATE, Stage.CUTOVER, Stage.CLEANUP, Stage.DONE)):
        require_transition(current, stage)


def test_deferred_indexes_are_built_between_copy_and_apply():
    require_transition(Stage.COPY, Stage.INDEXES)
    require_transition(Stage.INDEXES, Stage.APPLY)


@pytest.mark.parametrize("current, stage", [(Stage.INIT, Stage.CUTOVER), (Stage.COPY, Stage.VALIDATE),
                                            (Stage.APPLY, Stage.CUTOVER), (Stage.DONE, Stage.COPY),
                                            (Stage.CLEANUP, Stage.CUTOVER), (Stage.VALIDATE, Stage.VALIDATE)])
def test_a_skipped_or_backward_stage_is_refused(current, stage):
    with pytest.raises(IllegalTransition, match=f"stage {current} cannot enter stage {stage}"):
        require_transition(current, stage)


def test_every_stage_is_in_the_table_and_done_ends_it():
    assert set(TRANSITIONS) == set(Stage)
    assert TRANSITIONS[Stage.DONE] == frozenset()
