"""The suite's own schedule (tests/conftest.py): files longest first, the multi-process files one unit that
xdist hands to one worker, each file's tests together and in their order."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import conftest


def _items(*files: tuple[str, int]) -> list[SimpleNamespace]:
    return [SimpleNamespace(location=(f, i, f"t{i}"), name=f"{f}::t{i}") for f, n in files for i in range(n)]


def test_the_multiprocess_files_are_one_unit_weighed_as_their_sum() -> None:
    multi = sorted(conftest.MULTIPROCESS)[:2]
    table = {multi[0]: 30.0, multi[1]: 30.0, "tests/a.py": 50.0, "tests/b.py": 5.0}
    items = _items(("tests/b.py", 2), (multi[0], 3), ("tests/a.py", 2), (multi[1], 2))
    conftest._order_units(items, table)
    order = [i.location[0] for i in items]
    # The unit (60 s) before a.py (50 s) before b.py (5 s); each file's tests together, in their order.
    assert order == [multi[0]] * 3 + [multi[1]] * 2 + ["tests/a.py"] * 2 + ["tests/b.py"] * 2
    assert [i.location[1] for i in items] == [0, 1, 2, 0, 1, 0, 1, 0, 1]


def test_a_file_the_table_does_not_know_is_placed_by_its_test_count() -> None:
    table = {"tests/a.py": 10.0, "tests/b.py": 1.0}  # 1 s a test in both
    items = _items(("tests/b.py", 1), ("tests/new.py", 4), ("tests/a.py", 10))
    conftest._order_units(items, table)
    assert [i.location[0] for i in items] == ["tests/a.py"] * 10 + ["tests/new.py"] * 4 + ["tests/b.py"]


def test_xdist_groups_the_multiprocess_files_and_keeps_every_other_file_its_own_unit() -> None:
    pytest.importorskip("xdist")
    cls = conftest._unit_scheduling()
    split = cls.__new__(cls)._split_scope  # the split reads the node id alone
    (multi, other) = sorted(conftest.MULTIPROCESS)[:2]
    assert split(f"{multi}::test_a[x-y]") == split(f"{other}::C::test_b") == conftest.MULTIPROCESS_UNIT
    assert split("tests/test_select.py::test_c[a::b]") == "tests/test_select.py"


def test_every_multiprocess_file_exists() -> None:
    conftest._multiprocess_files_exist()  # a renamed file would leave the unit without it, silently
