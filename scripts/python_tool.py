"""What pipefill's Python tools in scripts/ (tokenize.py, detokenize.py) share: they run under
the Python environment scripts/setup_venv.sh makes, whoever launches them, and a user's mistake
is one `error:` line with exit status 2, like the C++ binary's.

Imported before anything outside the standard library: it picks the interpreter first.
"""
import argparse
import contextlib
import os
import sys

VENV_HINT = "run scripts/setup.sh (it makes the Python environment with scripts/setup_venv.sh)"


class UserError(Exception):
    """Bad input or usage: reported as `error: MESSAGE`, exit status 2, never a traceback."""


def venv_dir():
    # The same default as scripts/setup_venv.sh and the ctest cases.
    return os.environ.get("PIPEFILL_VENV") or os.path.join(os.path.expanduser("~"), ".cache", "pipefill", "venv")


def run_in_venv(script):
    """Re-executes `script` with the venv's interpreter unless this process already is it, so that
    `scripts/tool.py ...` works without activating anything."""
    venv = venv_dir()
    if os.path.realpath(sys.prefix) == os.path.realpath(venv):
        return
    python = os.path.join(venv, "bin", "python")
    if not os.access(python, os.X_OK):
        fail(f"no Python environment at {venv} (tokenizers, transformers, h5py): {VENV_HINT}")
    # The marker stops a loop if the venv's python somehow reports another prefix.
    if os.environ.get("PIPEFILL_VENV_REEXEC") == venv:
        fail(f"{python} does not run inside {venv}: remove it and {VENV_HINT}")
    os.environ["PIPEFILL_VENV_REEXEC"] = venv
    try:
        os.execv(python, [python, os.path.abspath(script)] + sys.argv[1:])
    except OSError as e:
        fail(f"cannot run {python}: {e.strerror}; {VENV_HINT}")


def run_in_venv_unless_importable(script, *modules):
    """The plotting and inspection tools: this interpreter when it has `modules` (Debian's
    python3 with scripts/setup.sh's packages does), else the venv's (a cluster's module or
    conda python3 usually lacks them)."""
    import importlib.util
    if all(importlib.util.find_spec(m) is not None for m in modules):
        return
    run_in_venv(script)


def fnv1a(data):
    """FNV-1a 64 of `data` (bytes), the hash behind every pipefill fingerprint (src/io/fnv1a.hpp)."""
    value = 0xCBF29CE484222325
    for byte in data:
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return value


def require_unicode(text, what):
    """`text`, unless it holds a lone surrogate (U+D800-U+DFFF unpaired: JSON's \\u escapes can
    write one, no tokenizer or UTF-8 file can take it): then a UserError naming `what`."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise UserError(f"{what} holds a lone surrogate, \\u{ord(text[e.start]):04x} at character {e.start}: not "
                        f"Unicode text (JSON escapes \\ud800-\\udfff must come in high-low pairs)")
    return text


def utf8_name(name):
    """A path or name from the command line as valid UTF-8: bytes that were not UTF-8 (which Python
    keeps as surrogates \\udc80-\\udcff) become U+FFFD, so that it can be stored as text."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def check_output_path(out, inputs=(), model=None):
    """--out names a file this user can create (its directory exists and is writable), not a
    directory, one of `inputs` nor a file of the `model` directory (its tokenizer.json, config.json,
    weights: read, never written): refused before any work, as a UserError."""
    if not out or out.endswith(os.sep):
        raise UserError(f"--out {out!r} is not a file name")
    if os.path.isdir(out):
        raise UserError(f"--out {out} is a directory")
    directory = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(directory):
        raise UserError(f"the directory of --out {out} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise UserError(f"cannot write into {directory} (the directory of --out {out})")
    if any(os.path.exists(p) and os.path.exists(out) and os.path.samefile(p, out) for p in inputs):
        raise UserError(f"--out {out} is also an input file")
    if model and os.path.lexists(out) and os.path.isdir(model) and \
            os.path.realpath(directory) == os.path.realpath(model):
        raise UserError(f"--out {out} is a file of --model {model}, which this tool reads: give another path")


@contextlib.contextmanager
def written_atomically(out):
    """A private temporary path beside OUT to write (yielded), renamed to OUT when the block ends
    without an error, removed otherwise: OUT is never half written, an existing OUT stays as it
    was until the new file is complete, and no other file is touched. OSError: a UserError."""
    import tempfile
    partial = None
    try:
        fd, partial = tempfile.mkstemp(prefix=f".{os.path.basename(out)}.", suffix=".partial",
                                       dir=os.path.dirname(os.path.abspath(out)))
        os.close(fd)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(partial, 0o666 & ~umask)  # mkstemp's 0600 would outlive the rename
        yield partial
        os.replace(partial, out)
    except OSError as e:
        raise UserError(f"cannot write {out}: {e.strerror or e}")
    finally:
        if partial is not None and os.path.exists(partial):
            os.unlink(partial)


def save_figure(fig, out, dpi=110):
    """A matplotlib figure to the PNG `out`, written as written_atomically writes."""
    with written_atomically(out) as partial:
        fig.savefig(partial, dpi=dpi, format="png")


def write_text_atomically(out, text):
    with written_atomically(out) as partial, open(partial, "w", encoding="utf-8") as f:
        f.write(text)


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose usage mistakes are one `error:` line pointing at --help (exit status 2, via
    main_with_user_errors), not a usage block. A subcommand's parser names its own --help."""

    def error(self, message):
        raise UserError(f"{message} (see {self.prog} --help)")


def fail(message):
    sys.stdout.flush()
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def main_with_user_errors(main):
    """Runs main() and returns what it returns; a UserError becomes the `error:` line, Ctrl-C a quiet exit 130. Anything else
    is a bug and keeps its traceback."""
    # A path typed in bytes that are not UTF-8 is printed back as those bytes, whatever the locale
    # (Python does so only under the C locale; elsewhere printing it would fail).
    sys.stdout.reconfigure(errors="surrogateescape")
    try:
        return main()
    except UserError as e:
        fail(str(e))
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        # `detokenize.py ... | head`: the reader left; nothing more to say.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
