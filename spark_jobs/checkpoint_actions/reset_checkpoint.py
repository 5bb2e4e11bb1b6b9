"""reset-checkpoint's step: per job, move the checkpoint aside and record where the new one starts (its rules, the
position's checks and what it misses or reads again: include/checkpoints/modes.py)."""

from __future__ import annotations

from include.checkpoints.modes import ResetCheckpointRules
from include.checkpoints.plan import write_start_position
from spark_jobs.checkpoint_actions.base import ActionContext, ModeAction, Prepared, Step, move_aside


class ResetCheckpoint(ResetCheckpointRules, ModeAction):
    def steps(self, ctx: ActionContext, prepared: list[Prepared]) -> list[Step]:
        return [Step(item.job, "move the checkpoint aside and record where the new one starts",
                     lambda item=item: reset(ctx, item)) for item in prepared]


def reset(ctx: ActionContext, prepared: Prepared) -> None:
    move_aside(ctx.settings, prepared)
    write_start_position(ctx.checkpoint(prepared.job), prepared.data["starting"])
