"""The platform check before Qt starts: a fake loader's answer decides, on every machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memlens.app.platform_check import (
    XCB_NEEDS,
    check,
    install_command,
    loader_dirs,
    missing_by_search,
    package_manager,
    parse_ldd,
    pyside_plugin_dir,
)

ROOT = Path(__file__).resolve().parents[2]
QT_LOADED = "any(m.startswith('PySide6') for m in sys.modules)"
DEBIAN = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n'
UBUNTU = "ID=ubuntu\nID_LIKE=debian\n"
FEDORA = "ID=fedora\n"
ARCH = "ID=arch\n"
TUMBLEWEED = 'ID="opensuse-tumbleweed"\nID_LIKE="opensuse suse"\n'
LDD_MISSING = """\
\tlinux-vdso.so.1 (0x00007ffd)
\tlibQt6XcbQpa.so.6 => /venv/PySide6/Qt/lib/libQt6XcbQpa.so.6 (0x00007f)
\tlibxcb-cursor.so.0 => not found
\tlibxcb-icccm.so.4 => not found
\tlibxcb-cursor.so.0 => not found
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)
"""
LDD_PRESENT = """\
\tlibQt6XcbQpa.so.6 => /venv/PySide6/Qt/lib/libQt6XcbQpa.so.6 (0x00007f)
\tlibxcb-cursor.so.0 => /lib/x86_64-linux-gnu/libxcb-cursor.so.0 (0x00007f)
"""


@pytest.fixture
def plugins(tmp_path):
    d = tmp_path / "platforms"
    d.mkdir()
    (d / "libqxcb.so").write_bytes(b"")
    return d


def fake_ldd(output: str, seen: list | None = None):
    def ldd(path):
        if seen is not None:
            seen.append(path.name)
        return output
    return ldd


def no_ldconfig():
    raise AssertionError("ldd answered; the fallback search must not run")


def test_missing_libraries_are_named_with_the_install_command_for_the_system(plugins):
    seen = []
    report = check({"DISPLAY": ":0"}, system="linux", plugin_dir=plugins,
                   ldd=fake_ldd(LDD_MISSING, seen), ldconfig=no_ldconfig, os_release=DEBIAN)
    assert not report.ok and report.platform == "xcb" and seen == ["libqxcb.so"]
    assert report.missing == ["libxcb-cursor.so.0", "libxcb-icccm.so.4"]
    assert "libxcb-cursor.so.0, libxcb-icccm.so.4" in report.message
    assert "sudo apt-get install libxcb-cursor0 libxcb-icccm4" in report.message


@pytest.mark.parametrize("os_release, command", [
    (UBUNTU, "sudo apt-get install libxcb-cursor0 libxcb-icccm4"),
    (FEDORA, "sudo dnf install xcb-util-cursor xcb-util-wm"),
    (ARCH, "sudo pacman -S xcb-util-cursor xcb-util-wm"),
    (TUMBLEWEED, "sudo zypper install libxcb-cursor0 libxcb-icccm4"),
])
def test_the_command_follows_os_release(plugins, os_release, command):
    report = check({"DISPLAY": ":0"}, system="linux", plugin_dir=plugins,
                   ldd=fake_ldd(LDD_MISSING), os_release=os_release)
    assert command in report.message


def test_an_unknown_system_gets_the_library_names_without_a_command(plugins):
    report = check({"DISPLAY": ":0"}, system="linux", plugin_dir=plugins,
                   ldd=fake_ldd(LDD_MISSING), os_release="ID=plan9\n")
    assert not report.ok and "libxcb-cursor.so.0" in report.message
    assert "sudo" not in report.message and "package manager" in report.message


def test_a_library_without_a_known_package_is_still_named(plugins):
    ldd = fake_ldd(LDD_MISSING + "\tlibodd.so.3 => not found\n")
    report = check({"DISPLAY": ":0"}, system="linux", plugin_dir=plugins, ldd=ldd,
                   os_release=DEBIAN)
    assert "sudo apt-get install libxcb-cursor0 libxcb-icccm4" in report.message
    assert "the packages that provide libodd.so.3" in report.message


def test_all_libraries_present_lets_qt_start(plugins):
    report = check({"DISPLAY": ":0"}, system="linux", plugin_dir=plugins,
                   ldd=fake_ldd(LDD_PRESENT), ldconfig=no_ldconfig, os_release=DEBIAN)
    assert report.ok and report.platform == "xcb" and report.missing == []


def test_no_display_says_so_and_points_to_headless_use(plugins):
    report = check({}, system="linux", plugin_dir=plugins, ldd=fake_ldd(LDD_PRESENT))
    assert not report.ok
    assert "DISPLAY" in report.message and "QT_QPA_PLATFORM=offscreen" in report.message
    assert "main.py run" in report.message


@pytest.mark.parametrize("env, system", [
    ({"QT_QPA_PLATFORM": "offscreen"}, "linux"),  # forced: the user's choice
    ({"QT_QPA_PLATFORM": "xcb", "DISPLAY": ":0"}, "linux"),
    ({}, "darwin"),
    ({}, "win32"),
])
def test_forced_platform_and_other_systems_are_not_checked(plugins, env, system):
    def ldd(path):
        raise AssertionError("nothing should be checked")
    assert check(env, system=system, plugin_dir=plugins, ldd=ldd).ok


def test_wayland_session_uses_the_wayland_plugin_when_it_loads(plugins):
    (plugins / "libqwayland.so").write_bytes(b"")
    seen = []

    def ldd(path):
        seen.append(path.name)
        return LDD_PRESENT if path.name == "libqwayland.so" else LDD_MISSING
    report = check({"WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0"}, system="linux",
                   plugin_dir=plugins, ldd=ldd, os_release=DEBIAN)
    assert report.ok and report.platform == "wayland" and seen == ["libqwayland.so"]


def test_wayland_falls_back_to_xcb_and_reports_what_wayland_lacks_first(plugins):
    (plugins / "libqwayland.so").write_bytes(b"")

    def ldd(path):
        return ("\tlibwayland-cursor.so.0 => not found\n" if path.name == "libqwayland.so"
                else LDD_PRESENT)
    env = {"WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0"}
    assert check(env, system="linux", plugin_dir=plugins, ldd=ldd).platform == "xcb"
    env.pop("DISPLAY")
    report = check(env, system="linux", plugin_dir=plugins, ldd=ldd, os_release=DEBIAN)
    assert not report.ok and report.platform == "wayland"
    assert "sudo apt-get install libwayland-cursor0" in report.message


def test_without_pyside_or_ldd_the_known_list_is_searched_where_the_loader_looks(tmp_path):
    present = tmp_path / "lib"
    present.mkdir()
    for soname in XCB_NEEDS:
        if soname != "libxcb-keysyms.so.1":
            (present / soname).write_bytes(b"")
    ldconfig = f"\tlibxcb.so.1 (libc6,x86-64) => {present}/libxcb.so.1\n"
    report = check({"DISPLAY": ":0"}, system="linux", plugin_dir=None,
                   ldd=fake_ldd("unused"), ldconfig=lambda: ldconfig, os_release=FEDORA)
    assert report.missing == ["libxcb-keysyms.so.1"]
    assert "sudo dnf install xcb-util-keysyms" in report.message
    # LD_LIBRARY_PATH comes first, as for the loader
    other = tmp_path / "other"
    other.mkdir()
    (other / "libxcb-keysyms.so.1").write_bytes(b"")
    dirs = loader_dirs({"LD_LIBRARY_PATH": str(other)}, ldconfig)
    assert dirs[:2] == [str(other), str(present)]
    assert missing_by_search(XCB_NEEDS, dirs) == []


def test_parsing_helpers():
    assert parse_ldd(LDD_MISSING) == ["libxcb-cursor.so.0", "libxcb-icccm.so.4"]
    assert parse_ldd(LDD_PRESENT) == []
    assert package_manager(UBUNTU) == "apt" and package_manager("ID=rhel\n") == "dnf"
    assert package_manager("ID=nixos\n") is None
    assert install_command(["libunknown.so.9"], "apt") is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the check is Linux-only")
def test_real_ldd_on_this_machines_plugin_agrees_with_ldd_itself():
    """The real plugin and the real ldd: our answer is exactly ldd's `not found` list."""
    import shutil

    plugins = pyside_plugin_dir()
    if plugins is None or shutil.which("ldd") is None:
        pytest.skip("no PySide6 xcb plugin or no ldd here")
    xcb = plugins / "libqxcb.so"
    out = subprocess.run(["ldd", str(xcb)], capture_output=True, text=True).stdout
    expected = sorted({line.split()[0] for line in out.splitlines() if "not found" in line})
    report = check({"DISPLAY": ":0"}, system="linux", plugin_dir=plugins)
    assert sorted(report.missing) == expected and report.ok == (not expected)


def _run_main(env_extra: dict) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    env.update(env_extra, PYTHONPATH=str(ROOT))
    code = ("import sys, runpy; sys.argv = ['main.py']\n"
            "try:\n    runpy.run_path('main.py', run_name='__main__')\n"
            f"finally:\n    print('QT_LOADED=%s' % {QT_LOADED})")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the check is Linux-only")
def test_main_without_a_display_exits_1_with_the_message_before_importing_qt():
    done = _run_main({})
    assert done.returncode == 1, done.stderr
    assert "no display" in done.stderr and "QT_QPA_PLATFORM=offscreen" in done.stderr
    assert "Aborted" not in done.stderr and "QT_LOADED=False" in done.stdout


def test_the_module_runs_as_a_script_without_qt():
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env["QT_QPA_PLATFORM"] = "offscreen"  # forced: exit 0 on any system
    code = ("import runpy, sys\n"
            "try:\n    runpy.run_module('memlens.app.platform_check', run_name='__main__')\n"
            "except SystemExit as e:\n"
            f"    print('rc=%s qt=%s' % (e.code, {QT_LOADED}))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.stdout.strip() == "rc=0 qt=False", done.stderr


def test_every_needed_library_has_a_package_on_each_system_and_ci_can_list_them(capsys):
    from memlens.app.platform_check import main, packages_for

    for manager in ("apt", "dnf", "pacman", "zypper"):
        assert install_command(XCB_NEEDS, manager) is not None
        assert len(packages_for(manager)) >= 10
    assert main(["--packages", "apt"]) == 0
    printed = capsys.readouterr().out.split()
    assert "libxcb-cursor0" in printed and printed == sorted(set(printed))
    assert main(["--packages", "nix"]) == 2


@pytest.mark.skipif(not sys.platform.startswith("linux") or not Path("/bin/bash").exists(),
                    reason="./dev is a bash script; the check is Linux-only")
def test_dev_app_checks_before_the_set_up(tmp_path):
    """`./dev app` without a display stops in the first second: no venv made, nothing
    installed, the same message as main.py's."""
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items()
           if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    env.update(MEMLENS_VENV=str(venv), PYTHON=sys.executable)
    done = subprocess.run(["bash", str(ROOT / "dev"), "app"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1 and "no display" in done.stderr
    assert "setting up" not in done.stderr and not venv.exists()
