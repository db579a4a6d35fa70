"""The agreement rows of ddpkit.horovod (compat/horovod_torch/_wire.py): what counts as a
mismatch, and that the error names every rank's tensor."""

import pytest
import torch

from ddpkit.compat.horovod_torch import _wire


class _Set:
    ranks = [0, 1, 2]


def rows(*specs):
    return [_wire.row_for(kind, t, **kw) for kind, t, kw in specs]


def test_agreeing_rows_pass_and_allgather_first_dimensions_may_differ():
    _wire.validate(rows(*[("allreduce", torch.ones(2, 3), {})] * 3), _Set, "allreduce")
    _wire.validate(rows(("allgather", torch.ones(1, 3), {}), ("allgather", torch.ones(5, 3), {}),
                        ("allgather", torch.ones(2, 3), {})), _Set, "allgather")


@pytest.mark.parametrize("kind,tensors,kw,words", [
    ("allreduce", [torch.ones(2), torch.ones(3), torch.ones(2)], {},
     ["rank 0: allreduce float32[2]", "rank 1: allreduce float32[3]"]),
    ("allgather", [torch.ones(1, 3), torch.ones(1, 4), torch.ones(1, 3)], {}, ["float32[1, 4]"]),
    ("allreduce", [torch.ones(2), torch.ones(2, dtype=torch.int32), torch.ones(2)], {},
     ["int32[2]"]),
])
def test_mismatches_name_the_ranks_and_tensors(kind, tensors, kw, words):
    with pytest.raises(_wire.MismatchError) as err:
        _wire.validate(rows(*[(kind, t, kw) for t in tensors]), _Set, kind)
    for w in words:
        assert w in str(err.value)


def test_roots_names_and_joined_ranks():
    t = torch.ones(2)
    with pytest.raises(_wire.MismatchError, match="root=1"):
        _wire.validate(rows(("broadcast", t, {"root": 0}), ("broadcast", t, {"root": 1}),
                            ("broadcast", t, {"root": 0})), _Set, "broadcast")
    with pytest.raises(_wire.MismatchError, match="tensor names"):
        _wire.validate(rows(("allreduce", t, {"name": "a"}), ("allreduce", t, {"name": "b"}),
                            ("allreduce", t, {})), _Set, "allreduce")
    joined = [_wire.row_for("join")] + rows(("allreduce", t, {}), ("allreduce", t, {}))
    _wire.validate(joined, _Set, "allreduce")  # a joined rank is no mismatch
    assert _wire.joined(joined) == [0]


def test_more_than_eight_dimensions_fold_into_the_last_slot():
    row = _wire.row_for("allreduce", torch.ones([1] * 8 + [2, 3]))
    assert row[8:16] == [1] * 7 + [6] and row[6] == 10
