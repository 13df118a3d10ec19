"""The resident process's change journal (producers/journal.py): a no-change ``memindex index``
that does not walk the disk, and every kind of change still seen - through real resident
processes, real inotify and real mounts."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from memindex.producers.journal import mount_table, watchable
from tests.test_resident import SERVED, Calls, calls  # noqa: F401 - `calls` is a fixture

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/mountinfo"), reason="inotify: Linux only")

VOUCHED = "vouched for by the change journal (no walk)"


def index(calls: Calls) -> tuple[bool, tuple[int, int, int]]:
    """(listing vouched for by the journal, (indexed, removed, unchanged)) of one resident call."""
    r = calls("index")
    assert r.returncode == 0, r.stderr
    assert SERVED in r.stderr, r.stderr
    m = re.search(r"indexed (\d+) file\(s\), removed (\d+), (\d+) unchanged", r.stdout)
    assert m, r.stdout
    return VOUCHED in r.stderr, (int(m[1]), int(m[2]), int(m[3]))


def settle(calls: Calls) -> tuple[int, int, int]:
    """The counts of a walking index, then index until the journal vouches again: a walk that
    found nothing to do records the listing and the no-change mark together, so at most one
    more walk (after one that did work) precedes a vouched call."""
    vouched, counts = index(calls)
    assert not vouched
    for _ in range(2):
        again, same = index(calls)
        assert same[:2] == (0, 0), same
        if again:
            return counts
    raise AssertionError("the journal did not vouch for a listing after two walks")


def found(calls: Calls, token: str) -> list[str]:
    import json

    r = calls("search", "--json", token)
    assert r.returncode == 0, r.stderr
    return [x["path"] for x in json.loads(r.stdout)["results"]]


def test_a_no_change_index_is_vouched_for_until_anything_under_the_roots_changes(calls, agent):
    calls.start()
    assert settle(calls) == (0, 0, 2)
    assert index(calls) == (True, (0, 0, 2))  # and again: no event, no walk

    changes = [
        # (what is done, what the next index must find)
        (lambda: agent.write("memory/2026-03-01.md", "# Network\n\nThe router wants a quokka firmware.\n"),
         (1, 0, 1)),
        (lambda: agent.write("memory/deep/er/still/2026-03-02.md", "Wombat notes.\n"), (1, 0, 2)),
        (lambda: os.rename(agent.workspace / "memory/deep", agent.workspace / "memory/moved"), (1, 1, 2)),
        # a file in a directory that was not there when the journal was first armed
        (lambda: agent.write("memory/moved/er/still/2026-03-02.md", "Wombat notes, revised.\n"), (1, 0, 2)),
        (lambda: os.utime(agent.workspace / "MEMORY.md", ns=(1, 1_700_000_000_000_000_000)), None),
        (lambda: (agent.workspace / "memory/2026-03-01.md").unlink(), (0, 1, 2)),
        (lambda: agent.write("MEMORY.md", "# Facts\n\nRod runs the Thursday capybara standup.\n"), (1, 0, 1)),
        (lambda: shutil.rmtree(agent.workspace / "memory"), (0, 1, 1)),
        (lambda: agent.write("memory/2026-03-03.md", "Axolotl day.\n"), (1, 0, 1)),
    ]
    for i, (change, expected) in enumerate(changes):
        change()
        counts = settle(calls)  # not vouched for: the change was seen
        if expected is not None:
            assert counts == expected, (i, counts)
    assert found(calls, "axolotl") == ["memory/2026-03-03.md"]
    assert found(calls, "capybara") == ["MEMORY.md"]
    assert found(calls, "wombat") == []  # its directory went with memory/


def test_extra_paths_roots_and_a_config_change_are_seen(calls, agent, tmp_path):
    notes = tmp_path / "notes"
    (notes / "sub").mkdir(parents=True)
    (notes / "sub" / "a.md").write_text("Pangolin facts.\n")
    single = tmp_path / "single.md"
    single.write_text("One file root.\n")
    agent.memory_config({"extraPaths": [str(notes), str(single)]})
    calls.start()
    assert settle(calls) == (2, 0, 2)
    assert index(calls) == (True, (0, 0, 4))
    single.write_text("One file root about a narwhal.\n")
    assert settle(calls) == (1, 0, 3)
    shutil.rmtree(notes)
    notes.mkdir()  # the root replaced by an empty directory of the same name
    assert settle(calls) == (0, 1, 3)
    agent.memory_config({"extraPaths": [str(single)]})  # not a file change: the settings'
    vouched, _ = index(calls)
    assert not vouched
    hits = found(calls, "narwhal")
    assert len(hits) == 1 and hits[0].endswith("single.md"), hits


def test_a_file_with_another_hard_link_is_never_vouched_for(calls, agent, tmp_path):
    """A write through a link outside the watched directories raises no event there."""
    outside = tmp_path / "notes-elsewhere.md"
    outside.write_text("Ibis notes.\n")
    os.link(outside, agent.workspace / "memory" / "linked.md")
    calls.start()
    assert index(calls) == (False, (1, 0, 2))
    assert [index(calls) for _ in range(3)] == [(False, (0, 0, 3))] * 3  # always walked: never recorded
    with open(outside, "a") as fh:  # in place, as vim writes a file with several links
        fh.write("The ibis moved to the east pond.\n")
    assert index(calls) == (False, (1, 0, 2))
    os.unlink(agent.workspace / "memory" / "linked.md")
    assert settle(calls) == (0, 1, 2)


def test_a_mount_over_a_watched_directory_is_seen(calls, agent):
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting needs root")
    agent.write("memory/inbox/hidden.md", "Tapir notes, under the mount point.\n")
    calls.start()
    assert settle(calls) == (1, 0, 2)
    assert index(calls) == (True, (0, 0, 3))
    point = agent.workspace / "memory" / "inbox"
    r = subprocess.run(["mount", "-t", "tmpfs", "memindex-test", str(point)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount here: {r.stderr.strip()}")
    try:
        # A mount raises no inotify event: the mount table is part of what the journal checks.
        assert settle(calls) == (0, 1, 2)
    finally:
        subprocess.run(["umount", str(point)], check=True)
    assert settle(calls) == (1, 0, 2)


def test_only_file_systems_whose_changes_inotify_sees_are_vouched_for():
    table = mount_table(
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        "30 22 0:40 / /home/me/nfs\\040share rw - nfs4 server:/export rw\n"
        "31 22 0:41 / /srv/notes rw - fuse.sshfs me@host:/notes rw\n"
        "32 22 0:42 / /tmp rw - tmpfs tmpfs rw\n"
    )
    assert ("/home/me/nfs share", "nfs4") in table
    assert watchable(table, [("/tmp/ws", False), ("/tmp/ws/memory", True)])
    assert watchable(table, [("/home/me/ws", True)])
    assert not watchable(table, [("/home/me/nfs share/ws", False)])  # on NFS
    assert not watchable(table, [("/home/me", True)])  # NFS mounted inside a whole tree
    assert watchable(table, [("/home/me", False)])  # ... but not below a single directory
    assert not watchable(table, [("/srv/notes/daily", True)])  # FUSE


def test_the_journal_bounds_its_watches_and_starts_afresh_past_them(tmp_path):
    """In one process, as the resident process and its children use it: records are taken in
    at the next refresh, any event voids them, and past the watch bound a new instance starts."""
    from memindex.producers import journal as jm

    j = jm.ChangeJournal.create()
    assert j is not None

    def look(context, roots):
        return j.listing(j.key(context, roots))

    def arm(context, roots):
        return j.arm(j.key(context, roots), roots)

    try:
        tree = tmp_path / "tree"
        for i in range(3):
            (tree / f"d{i}").mkdir(parents=True)
        roots = [(str(tmp_path), False), (str(tree), True)]
        token = arm("ctx", roots)
        assert token is not None
        j.record(token, "digest-1", 7)
        assert look("ctx", roots) is None  # taken in by the next refresh, not before
        j.refresh()
        assert look("ctx", roots) == ("digest-1", 7)
        assert look("other settings", roots) is None
        (tree / "d1" / "new.md").write_text("x")
        j.refresh()
        assert look("ctx", roots) is None  # an event in a watched subdirectory
        token = arm("ctx", roots)
        j.record(token, "digest-2", 8)
        j.refresh()
        assert look("ctx", roots) == ("digest-2", 8)
        old_fd = j._fd
        big = [(str(tree), True)]
        for i in range(jm._MAX_RECORDS + 1):  # more listings than it keeps records for
            j.record(arm(f"ctx {i}", big), f"d{i}", 1)
        j.refresh()
        assert j._fd != old_fd and j._fd >= 0
        assert look("ctx", roots) is None and look("ctx 3", big) is None
        token = arm("ctx", roots)
        j.record(token, "digest-3", 9)
        j.refresh()
        assert look("ctx", roots) == ("digest-3", 9)
    finally:
        j.close()
