"""``dsclean.StatefulDataLoader``: torchdata's ``StatefulDataLoader`` whose ``state_dict()`` keeps the guard's.

A run resumed mid-epoch with torchdata's loader picks the sampler up where it stopped; the
guard's part of the state is the epoch replacements are drawn for, the seed and the counts the
failure budget is measured against (``guard(...).state_dict()``). This loader wraps an unguarded
dataset in ``dsclean.guard(dataset, log=log)`` (as :class:`dsclean.DataLoader` does), puts the
guard's state under ``"dsclean_guard"`` in ``state_dict()`` and restores it in
``load_state_dict()`` before any worker starts, so a resumed run replaces the same samples
(``on_error="replace"`` draws from ``(seed, epoch, index, attempt)``) and keeps its budget.

A dead worker is named by :class:`dsclean.DataLoader`, not by this loader (torchdata has its own
worker loop); the failures the guard sees are logged and budgeted alike. Needs the ``stateful``
extra (``pip install 'dsclean[stateful]'``, torchdata).
"""

from __future__ import annotations

import os

try:
    from torchdata.stateful_dataloader import StatefulDataLoader as _TorchdataLoader
except ImportError as exc:  # an optional extra: name it
    raise ImportError("dsclean.StatefulDataLoader needs torchdata: pip install 'dsclean[stateful]'") from exc

from ..data.guard import loader_guard

#: the key of the guard's state in the loader's state_dict
STATE_KEY = "dsclean_guard"


class StatefulDataLoader(_TorchdataLoader):
    """torchdata's ``StatefulDataLoader`` with the same arguments, plus ``log`` (the failure log).

    ``loader.dataset`` is the guard; ``state_dict()`` / ``load_state_dict()`` carry its state.
    """

    def __init__(self, dataset, *args, log: str | os.PathLike | None = None, **kwargs) -> None:
        dataset = loader_guard(dataset, log)
        super().__init__(dataset, *args, **kwargs)

    def set_epoch(self, epoch: int) -> None:
        """Forward the epoch to the sampler (``DistributedSampler``) and the guard."""
        setter = getattr(self.sampler, "set_epoch", None)
        if callable(setter):
            setter(epoch)
        self.dataset.set_epoch(epoch)

    def state_dict(self) -> dict:
        state = super().state_dict()
        state[STATE_KEY] = self.dataset.state_dict()
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        state = dict(state_dict)
        ours = state.pop(STATE_KEY, None)
        if ours is not None:
            self.dataset.load_state_dict(ours)
        super().load_state_dict(state)
