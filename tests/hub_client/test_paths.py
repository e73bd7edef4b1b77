import pytest

from nkihub.hub_client import InvalidNameError
from nkihub.hub_client import paths as P

BAD_REPO_IDS = ["../etc", "a/..", "a/b/c", "/abs", "a\\b", "a/b\x00", "a/" + "x" * 200, "a/.git", ".a/b", "a/b.git"]
BAD_REVISIONS = ["..", "a/../b", "/main", "main/", "a\\b", "ma\x00in", "x" * 300, "a//b", "v1.lock"]
BAD_PATHS = ["../x", "a/../../x", "/etc/passwd", "a\\b", "a\x00b", "a//b", "./a", "C:/x", ".git/config",
             "a/" + "y" * 300, "z" * 2000]


@pytest.mark.parametrize("value", BAD_REPO_IDS)
def test_bad_repo_ids_are_refused(value):
    with pytest.raises(InvalidNameError):
        P.check_repo_id(value)


@pytest.mark.parametrize("value", BAD_REVISIONS)
def test_bad_revisions_are_refused(value):
    with pytest.raises(InvalidNameError):
        P.check_revision(value)


@pytest.mark.parametrize("value", BAD_PATHS)
def test_bad_paths_are_refused(value):
    with pytest.raises(InvalidNameError):
        P.check_path(value)


@pytest.mark.parametrize("ok", ["main", "v1", "v1.0.0", "refs/pr/1", "a" * 40, "feature/x-y_z+1"])
def test_good_revisions_pass(ok):
    assert P.check_revision(ok) == ok


def test_good_names_pass():
    assert P.check_repo_id("neuron/vit-attn") == "neuron/vit-attn"
    assert P.check_path("build/torch-cpu/vit_attn/__init__.py")
    assert P.check_path(".gitattributes") == ".gitattributes"


def test_invalid_name_error_is_a_value_error():
    with pytest.raises(ValueError, match="repo id"):
        P.check_repo_id("a/../b")
