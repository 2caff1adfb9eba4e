"""Before Qt starts: can its platform plugin load here? If not, say which libraries to install.

Qt's own answer to a missing system library is an abort (exit 134) with a paragraph about
plugins; a new user needs the package names for their system. This module imports only the
standard library, so `main.py` and `./dev app` (with whatever python3 it finds, before the
set-up) can run it before PySide6 is imported or even installed. `python -m app.platform_check`
exits 0 when the window can open and 1 with the message when it cannot; with `--packages`
it prints the packages the xcb plugin needs on this system (what .ci/run installs).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# What libqxcb.so (through libQt6XcbQpa) needs beyond glibc, the C++ runtime and what PySide6
# bundles (`ldd libqxcb.so`, PySide6 6.11): searched for when PySide6 is not installed yet
# (./dev app on a first run) or ldd cannot run; also what .ci/run installs.
XCB_NEEDS = (
    "libxcb.so.1", "libX11-xcb.so.1", "libX11.so.6", "libxcb-cursor.so.0",
    "libxcb-icccm.so.4", "libxcb-image.so.0", "libxcb-keysyms.so.1", "libxcb-randr.so.0",
    "libxcb-render-util.so.0", "libxcb-render.so.0", "libxcb-shape.so.0", "libxcb-shm.so.0",
    "libxcb-sync.so.1", "libxcb-xfixes.so.0", "libxcb-xkb.so.1", "libxkbcommon.so.0",
    "libxcb-util.so.1", "libxkbcommon-x11.so.0", "libfontconfig.so.1", "libfreetype.so.6",
    "libEGL.so.1", "libGL.so.1", "libGLX.so.0", "libglib-2.0.so.0", "libdbus-1.so.3",
)

# soname -> package, per package manager (Debian/Ubuntu, Fedora/RHEL, Arch, openSUSE).
_PACKAGES: dict[str, tuple[str, str, str, str]] = {
    # soname: (apt, dnf, pacman, zypper)
    "libxcb.so.1": ("libxcb1", "libxcb", "libxcb", "libxcb1"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb", "libx11", "libX11-xcb1"),
    "libX11.so.6": ("libx11-6", "libX11", "libx11", "libX11-6"),
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor", "xcb-util-cursor",
                           "libxcb-cursor0"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm", "xcb-util-wm", "libxcb-icccm4"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image", "xcb-util-image", "libxcb-image0"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms", "xcb-util-keysyms",
                            "libxcb-keysyms1"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil",
                                "xcb-util-renderutil", "libxcb-render-util0"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util", "xcb-util", "libxcb-util1"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb", "libxcb", "libxcb-randr0"),
    "libxcb-render.so.0": ("libxcb-render0", "libxcb", "libxcb", "libxcb-render0"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb", "libxcb", "libxcb-shape0"),
    "libxcb-shm.so.0": ("libxcb-shm0", "libxcb", "libxcb", "libxcb-shm0"),
    "libxcb-sync.so.1": ("libxcb-sync1", "libxcb", "libxcb", "libxcb-sync1"),
    "libxcb-xfixes.so.0": ("libxcb-xfixes0", "libxcb", "libxcb", "libxcb-xfixes0"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb", "libxcb", "libxcb-xkb1"),
    "libxcb-xinerama.so.0": ("libxcb-xinerama0", "libxcb", "libxcb", "libxcb-xinerama0"),
    "libxcb-xinput.so.0": ("libxcb-xinput0", "libxcb", "libxcb", "libxcb-xinput0"),
    "libxcb-glx.so.0": ("libxcb-glx0", "libxcb", "libxcb", "libxcb-glx0"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon", "libxkbcommon", "libxkbcommon0"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11", "libxkbcommon-x11",
                              "libxkbcommon-x11-0"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig", "fontconfig", "libfontconfig1"),
    "libfreetype.so.6": ("libfreetype6", "freetype", "freetype2", "libfreetype6"),
    "libEGL.so.1": ("libegl1", "libglvnd-egl", "libglvnd", "libEGL1"),
    "libGL.so.1": ("libgl1", "libglvnd-glx", "libglvnd", "libGL1"),
    "libGLX.so.0": ("libglx0", "libglvnd-glx", "libglvnd", "libGLX0"),
    "libOpenGL.so.0": ("libopengl0", "libglvnd-opengl", "libglvnd", "libOpenGL0"),
    "libglib-2.0.so.0": ("libglib2.0-0", "glib2", "glib2", "libglib-2_0-0"),
    "libgthread-2.0.so.0": ("libglib2.0-0", "glib2", "glib2", "libgthread-2_0-0"),
    "libdbus-1.so.3": ("libdbus-1-3", "dbus-libs", "dbus", "libdbus-1-3"),
    "libSM.so.6": ("libsm6", "libSM", "libsm", "libSM6"),
    "libICE.so.6": ("libice6", "libICE", "libice", "libICE6"),
    "libwayland-client.so.0": ("libwayland-client0", "libwayland-client", "wayland",
                               "libwayland-client0"),
    "libwayland-cursor.so.0": ("libwayland-cursor0", "libwayland-cursor", "wayland",
                               "libwayland-cursor0"),
    "libwayland-egl.so.1": ("libwayland-egl1", "libwayland-egl", "wayland", "libwayland-egl1"),
}
_MANAGERS = ("apt", "dnf", "pacman", "zypper")
_INSTALL = {"apt": "sudo apt-get install", "dnf": "sudo dnf install",
            "pacman": "sudo pacman -S", "zypper": "sudo zypper install"}
# os-release ID / ID_LIKE words -> package manager
_FAMILIES = {"debian": "apt", "ubuntu": "apt", "fedora": "dnf", "rhel": "dnf",
             "centos": "dnf", "arch": "pacman", "suse": "zypper", "opensuse": "zypper"}
_HEADLESS = ("For headless use, no display is needed:\n"
             "  python main.py run --preset mlp --steps 100        (the training loop, files)\n"
             "  QT_QPA_PLATFORM=offscreen python main.py shot --preset mlp --out shot.png\n"
             "  (or set QT_QPA_PLATFORM=offscreen for any Qt command)")

@dataclass
class PlatformReport:
    """What the check found: `ok`, or the message to print instead of starting Qt."""

    ok: bool
    platform: str = ""  # the Qt platform plugin that will be used
    missing: list[str] = field(default_factory=list)  # sonames the loader cannot find
    message: str = ""


def package_manager(os_release: str) -> str | None:
    """apt, dnf, pacman or zypper, from /etc/os-release's ID and ID_LIKE; None if unknown."""
    words: list[str] = []
    for line in os_release.splitlines():
        key, _, value = line.partition("=")
        if key.strip() in ("ID", "ID_LIKE"):
            words += value.strip().strip("\"'").lower().replace("-", " ").split()
    for word in words:
        for family, manager in _FAMILIES.items():
            if word == family or word.startswith(family):
                return manager
    return None


def install_command(missing: Sequence[str], manager: str | None) -> str | None:
    """The command that installs the packages providing `missing` sonames, or None."""
    if manager not in _INSTALL:
        return None
    column = _MANAGERS.index(manager)
    packages = sorted({_PACKAGES[s][column] for s in missing if s in _PACKAGES})
    return f"{_INSTALL[manager]} {' '.join(packages)}" if packages else None


def parse_ldd(output: str) -> list[str]:
    """Sonames ldd reports as `not found`, each once, in order."""
    out: list[str] = []
    for m in re.finditer(r"^\s*(\S+)\s+=>\s+not found", output, re.MULTILINE):
        if m.group(1) not in out:
            out.append(m.group(1))
    return out


def run_ldd(path: Path) -> str | None:
    """ldd's report for `path` (the dynamic loader's own search: RPATH, LD_LIBRARY_PATH, the
    ld.so cache); None where ldd is absent or fails."""
    ldd = shutil.which("ldd")
    if ldd is None:
        return None
    try:
        done = subprocess.run([ldd, str(path)], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 or "not found" in done.stdout else None


def loader_dirs(env: Mapping[str, str], ldconfig_output: str | None) -> list[str]:
    """Where the loader looks for a library with no RPATH help: LD_LIBRARY_PATH, then the
    ld.so cache (`ldconfig -p`), then the default directories."""
    dirs = [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
    for m in re.finditer(r"=>\s+(/\S+)", ldconfig_output or ""):
        d = os.path.dirname(m.group(1))
        if d not in dirs:
            dirs.append(d)
    return [*dirs, "/lib", "/usr/lib", "/lib64", "/usr/lib64"]


def missing_by_search(needs: Sequence[str], dirs: Sequence[str],
                      exists: Callable[[str], bool] = os.path.exists) -> list[str]:
    """The sonames in `needs` found in none of `dirs` (the fallback to ldd)."""
    return [s for s in needs if not any(exists(os.path.join(d, s)) for d in dirs)]


def pyside_plugin_dir() -> Path | None:
    """PySide6's `Qt/plugins/platforms` folder, found without importing PySide6."""
    try:
        spec = importlib.util.find_spec("PySide6")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        for sub in ("Qt/plugins/platforms", "plugins/platforms"):
            d = Path(root) / sub
            if d.is_dir():
                return d
    return None


def _ldconfig_p() -> str | None:
    exe = shutil.which("ldconfig") or ("/sbin/ldconfig" if os.path.exists("/sbin/ldconfig")
                                       else None)
    if exe is None:
        return None
    try:
        return subprocess.run([exe, "-p"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def missing_libraries(plugin: Path | None, env: Mapping[str, str],
                      ldd: Callable[[Path], str | None] = run_ldd,
                      ldconfig: Callable[[], str | None] = _ldconfig_p) -> list[str]:
    """The shared libraries the plugin needs that the dynamic loader would not find: ldd's
    answer where it can run, else the known list searched where the loader searches."""
    if plugin is not None and plugin.exists():
        report = ldd(plugin)
        if report is not None:
            return parse_ldd(report)
    return missing_by_search(XCB_NEEDS, loader_dirs(env, ldconfig()))


def _read_os_release() -> str:
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            return Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
    return ""


def check(env: Mapping[str, str] | None = None, *, system: str = sys.platform,
          plugin_dir: Path | str | None = "find", ldd: Callable[[Path], str | None] = run_ldd,
          ldconfig: Callable[[], str | None] = _ldconfig_p,
          os_release: str | None = None) -> PlatformReport:
    """Can Qt's platform plugin start here? Only Linux desktops are checked: on macOS and
    Windows Qt ships what it needs, and a forced QT_QPA_PLATFORM is the user's choice."""
    env = os.environ if env is None else env
    if not system.startswith("linux") or env.get("QT_QPA_PLATFORM"):
        return PlatformReport(ok=True, platform=env.get("QT_QPA_PLATFORM", ""))
    if not env.get("DISPLAY") and not env.get("WAYLAND_DISPLAY"):
        return PlatformReport(ok=False, message=(
            "memlens: no display: neither DISPLAY nor WAYLAND_DISPLAY is set, so the desktop "
            "window cannot open here.\n" + _HEADLESS))
    if plugin_dir == "find":
        plugin_dir = pyside_plugin_dir()
    plugins = Path(plugin_dir) if plugin_dir is not None else None
    # Qt 6 on a Wayland session tries its wayland plugin first, then xcb (XWayland).
    candidates = []
    if env.get("WAYLAND_DISPLAY") and plugins is not None and (plugins / "libqwayland.so").exists():
        candidates.append(("wayland", plugins / "libqwayland.so"))
    if env.get("DISPLAY"):
        candidates.append(("xcb", plugins / "libqxcb.so" if plugins is not None else None))
    if not candidates and plugins is None:  # Wayland only, PySide6 not installed yet
        return PlatformReport(ok=True, platform="wayland")
    if not candidates:  # Wayland only, and no wayland plugin in this PySide6
        return PlatformReport(ok=False, platform="wayland", message=(
            "memlens: WAYLAND_DISPLAY is set but this PySide6 has no wayland platform plugin, "
            "and DISPLAY (XWayland) is not set.\nStart XWayland and set DISPLAY, or run "
            "with QT_QPA_PLATFORM=wayland after installing Qt's wayland plugin.\n" + _HEADLESS))
    found = []
    for name, path in candidates:
        missing = missing_libraries(path, env, ldd, ldconfig)
        if not missing:
            return PlatformReport(ok=True, platform=name)
        found.append((name, missing))
    name, missing = found[0]  # what Qt would try first
    manager = package_manager(_read_os_release() if os_release is None else os_release)
    command = install_command(missing, manager)
    how = (f"Install them with:\n  {command}" if command else
           "Install the packages that provide them with your system's package manager.")
    unknown = [s for s in missing if s not in _PACKAGES]
    if command and unknown:
        how += f"\nand the packages that provide {', '.join(unknown)}."
    return PlatformReport(ok=False, platform=name, missing=missing, message=(
        f"memlens: Qt's {name} platform plugin cannot load: the system libraries "
        f"{', '.join(missing)} are missing.\n{how}\n"
        "(To run without a window meanwhile: QT_QPA_PLATFORM=offscreen, or the headless "
        "commands: python main.py run --help.)"))


def packages_for(manager: str | None) -> list[str]:
    """Every package the xcb plugin needs on this package manager (CI installs them)."""
    if manager not in _INSTALL:
        return []
    return sorted({_PACKAGES[s][_MANAGERS.index(manager)] for s in XCB_NEEDS})


def main(argv: Sequence[str] = ()) -> int:
    if argv[:1] == ["--packages"]:  # `--packages [apt|dnf|pacman|zypper]`: print, one line
        manager = argv[1] if len(argv) > 1 else package_manager(_read_os_release())
        print(" ".join(packages_for(manager)))
        return 0 if manager in _INSTALL else 2
    try:
        report = check()
    except Exception as exc:  # a check that breaks must not stand between the user and Qt
        print(f"memlens: platform check skipped ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 0
    if not report.ok:
        print(report.message, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
