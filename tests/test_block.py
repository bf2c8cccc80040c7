"""The pool's shared-memory block (mploader.engine.block): arrays written packed and read back, byte for byte;
nothing maps it; a descriptor open at a fork is not the child's."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from mploader.engine.block import Block
from mploader.scan import BATCH_TABLE
from mploader.scan.table import INDEX_DRAFT

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")


@pytest.fixture
def block(request: pytest.FixtureRequest) -> Block:
    b = Block.create(f"mploader-test-{os.getpid()}-{request.node.name}", 1 << 24)
    yield b
    b.unlink()


def test_arrays_come_back_as_written_packed_from_byte_0(block: Block) -> None:
    rng = np.random.default_rng(7)
    table = np.frombuffer(rng.bytes(37 * BATCH_TABLE.itemsize), BATCH_TABLE)
    index = np.frombuffer(rng.bytes(3 * INDEX_DRAFT.itemsize), INDEX_DRAFT)
    rows = rng.integers(0, 1 << 40, 11)
    arrays = [table, np.zeros(0, np.int64), index, rows]  # an empty one between: it takes no byte
    block.write(arrays)
    assert os.path.getsize(block.path) == 1 << 24  # sparse: the size the parent gave it
    raw = open(block.path, "rb").read(sum(a.nbytes for a in arrays))
    assert raw == b"".join(a.tobytes() for a in arrays)
    out = [np.empty(len(a), a.dtype) for a in arrays]
    block.read(out)
    assert all(o.tobytes() == a.tobytes() for o, a in zip(out, arrays))


def test_a_read_past_what_was_written_names_the_block(tmp_path) -> None:
    short = Block.create("short", 100, shm_dir=str(tmp_path))
    with pytest.raises(EOFError, match=f"{short.path}: 60 bytes missing at byte 100"):
        short.read([np.empty(20, np.int64)])  # 160 bytes from a block of 100


def test_a_block_is_never_mapped_and_gone_once_unlinked(block: Block) -> None:
    block.write([np.ones(1 << 20, np.uint8)])
    with open("/proc/self/maps") as f:
        assert block.path not in f.read()
    assert not any(os.readlink(f"/proc/self/fd/{fd}") == block.path for fd in map(int, os.listdir("/proc/self/fd"))
                   if os.path.exists(f"/proc/self/fd/{fd}"))
    block.unlink()
    block.unlink()  # twice: harmless
    assert not os.path.exists(block.path)


def test_a_child_forked_while_a_block_is_open_does_not_keep_it(block: Block, monkeypatch) -> None:
    """A fork in the moment a descriptor is open (another thread starting a forked worker) leaves the child
    without it: it would hold the block's pages in /dev/shm after the unlink, until the child exits."""
    import mploader.engine.block as block_mod

    seen: dict[str, object] = {}
    real_transfer = block_mod._transfer

    def transfer_with_a_fork(call, fd, arrays, path):  # type: ignore[no-untyped-def]
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: is the block's descriptor still open here?
            os.close(r)
            try:
                os.fstat(fd)
                os.write(w, b"open")
            except OSError:
                os.write(w, b"closed")
            os._exit(0)
        os.close(w)
        seen["child"] = os.read(r, 16).decode()
        os.close(r)
        os.waitpid(pid, 0)
        return real_transfer(call, fd, arrays, path)

    monkeypatch.setattr(block_mod, "_transfer", transfer_with_a_fork)
    block.write([np.ones(8, np.int64)])
    assert seen["child"] == "closed"


def test_a_fork_waits_for_no_open_and_leaves_both_sides_free_to_open(tmp_path) -> None:
    """The fork guard (mploader.engine.cleanup.open_held) is taken around every fork and let go on both sides: a
    child that could not open a block after the fork would hang its first scan, a parent its next load."""
    from mploader.engine.cleanup import close_held, open_held

    marker = str(tmp_path / "held")
    fd = open_held(marker, os.O_RDWR | os.O_CREAT)
    pid = os.fork()
    if pid == 0:  # the child: the parent's descriptor is gone, and a new one opens and closes
        try:
            os.fstat(fd)
            os._exit(3)
        except OSError:
            pass
        mine = open_held(marker, os.O_RDONLY)
        close_held(mine)
        os._exit(0)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.01)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        raise AssertionError("the child hung on the fork guard")
    assert os.waitstatus_to_exitcode(status) == 0
    close_held(fd)  # the parent too: the guard is free again
    again = open_held(marker, os.O_RDONLY)
    close_held(again)
