"""``import hypersack`` is light (public names load on first use) and still exposes everything."""
import subprocess
import sys


def test_import_is_light_and_names_load_on_use():
    code = ("import sys, hypersack\n"
            "assert 'hypersack.study' not in sys.modules and 'torch' not in sys.modules\n"
            "assert hypersack.Study.__name__ == 'Study'\n"
            "assert hypersack.errors.ConfigError is hypersack.ConfigError\n"
            "assert callable(hypersack.allow_checkpoint_types)\n"
            "assert set(hypersack.__all__) <= set(dir(hypersack))\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_an_unknown_name_is_an_attribute_error():
    import hypersack
    try:
        hypersack.nope
    except AttributeError as exc:
        assert "nope" in str(exc)
    else:
        raise AssertionError("hypersack.nope did not raise")
