"""The suite's own layout: tests/ has no __init__.py files, so pytest imports each test module by its basename;
two test files with one basename in different folders stop collection ("import file mismatch") in a fresh clone."""
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def duplicated_test_basenames(root: Path) -> dict:
    by_name = defaultdict(list)
    for path in root.rglob("test_*.py"):
        by_name[path.name].append(str(path.relative_to(root)))
    return {name: sorted(paths) for name, paths in by_name.items() if len(paths) > 1}


def test_no_two_test_modules_share_a_basename():
    assert duplicated_test_basenames(TESTS) == {}


def test_a_shared_basename_is_found(tmp_path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "test_same.py").write_text("")
    (tmp_path / "a" / "test_other.py").write_text("")
    assert duplicated_test_basenames(tmp_path) == {"test_same.py": ["a/test_same.py", "b/test_same.py"]}
