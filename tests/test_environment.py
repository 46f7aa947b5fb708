"""Issue 47 item 6: the environment and the messages: one line and exit code 2 for each, never an internal error.

`DEPTHLAB_STORE='~nosuchuser/x'` and `--plugin` on a symlink loop were internal errors (exit 1);
`COLUMNS=0` printed nothing, exit 0; `atlas --finished-only --store TYPO` said "23 of 23 cells unfinished",
exit 0, and created a store there; `construct … --set gamma=1e-308` said "must be a number (got '1e-308')"
(YAML 1.1 reads it as text), then, once read, failed inside an SVD; a figure that a full disk cut short was an
OSError naming no file. Commands run in this process (``conftest.run_depthlab``).
"""

from __future__ import annotations

import errno

import pytest

from conftest import one_line_exit_2, run_depthlab


def test_a_home_folder_of_no_user_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("DEPTHLAB_STORE", "~nosuchuser-depthlab/x")
    one_line_exit_2(run_depthlab("runs"), "$DEPTHLAB_STORE: ~nosuchuser-depthlab/x: no home folder")
    one_line_exit_2(run_depthlab("runs", "--store", "~nosuchuser-depthlab/y"), "--store: ~nosuchuser-depthlab/y")


def test_a_plugin_on_a_symlink_loop_is_named(tmp_path):
    (tmp_path / "a.py").symlink_to(tmp_path / "b.py")
    (tmp_path / "b.py").symlink_to(tmp_path / "a.py")
    one_line_exit_2(run_depthlab("--plugin", str(tmp_path / "a.py"), "tasks"),
                    f"--plugin {tmp_path / 'a.py'}: cannot find the file", "ymlink loop")


@pytest.mark.parametrize("columns", ["0", "1", "19"])
def test_a_terminal_too_narrow_falls_back_to_80_columns(monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", columns)
    code, out, err = run_depthlab("tasks")
    assert code == 0 and "memorization" in out, err
    assert max(map(len, out.splitlines())) <= 80


def test_atlas_finished_only_refuses_a_missing_store_as_runs_does(tmp_path):
    one_line_exit_2(run_depthlab("atlas", "--finished-only", "--store", str(tmp_path / "TYPO")),
                    "--store: no depthlab store at")
    assert not (tmp_path / "TYPO").exists()


def test_a_number_yaml_reads_as_text_is_a_number_and_a_margin_too_small_is_named():
    one_line_exit_2(run_depthlab("construct", "seed003-nearest-neighbor", "--set", "gamma=1e-308"),
                    "gamma: at least 1e-06 (got 1e-308)")
    one_line_exit_2(run_depthlab("construct", "seed003-nearest-neighbor", "--set", "gamma=abc"),
                    "gamma: must be a finite number")


def test_a_figure_cut_short_by_a_full_disk_names_its_file(tmp_path, monkeypatch):
    from depthlab.draw.style import StyledFigure, new_figure, save

    def full(self, target, **kwargs):
        target.write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(StyledFigure, "savefig", full)
    with new_figure() as fig, pytest.raises(OSError) as failed:
        save(fig, tmp_path / "atlas.png")
    assert failed.value.filename == str(tmp_path / "atlas.png") and failed.value.errno == errno.ENOSPC
    assert not (tmp_path / "atlas.png").exists()
