"""Worker slots: one per live process and database file, however the file is named."""

import socket
import subprocess
import sys
from pathlib import Path

from taskloom.persistence.sqlite.slots import WorkerSlot
from tests.helpers import checkout_env

HOST = socket.gethostname()
_PRINT_RELATIVE_SLOT = (
    "from pathlib import Path; from taskloom.persistence.sqlite.slots import WorkerSlot;"
    " print(WorkerSlot(Path('tasks.db')).acquire().number)"
)


def test_two_holders_of_one_database_get_two_slots(tmp_path: Path) -> None:
    database = tmp_path / "tasks.db"
    with WorkerSlot(database) as first, WorkerSlot(database) as second:
        assert (first.number, second.number) == (0, 1)
        assert first.worker_id != second.worker_id


def test_a_database_reached_through_symlinks_shares_its_slots(tmp_path: Path) -> None:
    real = tmp_path / "data" / "tasks.db"
    real.parent.mkdir()
    linked_folder = tmp_path / "folder-link"
    linked_folder.symlink_to(real.parent, target_is_directory=True)
    linked_file = tmp_path / "file-link.db"
    linked_file.symlink_to(real)
    paths = (real, linked_folder / "tasks.db", linked_file)
    with WorkerSlot(paths[0]) as a, WorkerSlot(paths[1]) as b, WorkerSlot(paths[2]) as c:
        # One worker id each, or each process would take the others' live runs back.
        assert {a.worker_id, b.worker_id, c.worker_id} == {f"{HOST}:slot-{n}" for n in range(3)}


def test_a_relative_path_shares_the_slots_of_the_absolute_one(tmp_path: Path) -> None:
    database = tmp_path / "tasks.db"
    with WorkerSlot(database) as first:
        held = subprocess.run(
            [
                sys.executable,
                "-c",
                _PRINT_RELATIVE_SLOT,
            ],
            cwd=tmp_path,
            env=checkout_env(),
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        assert first.number == 0
        assert held.stdout.split() == ["1"]


def test_a_slot_is_free_again_once_its_holder_is_gone(tmp_path: Path) -> None:
    database = tmp_path / "tasks.db"
    with WorkerSlot(database) as first:
        number = first.number
    with WorkerSlot(database) as again:
        assert again.number == number
