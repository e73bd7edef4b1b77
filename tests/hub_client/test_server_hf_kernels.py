"""What Hugging Face kernels 0.17 asks of a Hub beyond plain huggingface_hub use: the organization overview
its trust check reads, and full ref names (``refs/heads/v1``) in tree, resolve and paths-info."""

from __future__ import annotations

import pytest
from huggingface_hub import CommitOperationAdd, HfApi, hf_hub_download
from huggingface_hub.errors import HfHubHTTPError, RevisionNotFoundError
from huggingface_hub.hf_api import RepoFile

from nkihub.hub_client.server import serve_in_background

REPO = "neuron/demo"


def _repo(hub) -> tuple[HfApi, str, str]:
    """A kernel repo with v1 (branch), v1.0.0 (tag) at the first commit and main one commit ahead."""
    api = HfApi(endpoint=hub.url, token=False)
    api.create_repo(REPO, repo_type="kernel")
    add = [CommitOperationAdd(path_in_repo="build/torch-cpu/pkg/__init__.py", path_or_fileobj=b"X = 1\n")]
    first = api.create_commit(REPO, add, commit_message="v1", repo_type="kernel").oid
    api.create_branch(REPO, branch="v1", revision=first, repo_type="kernel")
    api.create_tag(REPO, tag="v1.0.0", revision=first, repo_type="kernel")
    add = [CommitOperationAdd(path_in_repo="build/torch-cpu/pkg/__init__.py", path_or_fileobj=b"X = 2\n")]
    second = api.create_commit(REPO, add, commit_message="next", repo_type="kernel").oid
    return api, first, second


def test_organization_overview_says_who_is_a_trusted_kernel_publisher(tmp_path):
    with serve_in_background(tmp_path / "hub", trusted_publishers=("neuron", "acme")) as hub:
        api = HfApi(endpoint=hub.url, token=False)
        api.create_repo("someone/thing", repo_type="kernel")
        assert api.get_organization_overview("neuron").trustedKernelPublisher is True
        assert api.get_organization_overview("acme").trustedKernelPublisher is True  # trusted, no repo yet
        overview = api.get_organization_overview("someone")
        assert overview.name == "someone" and overview.trustedKernelPublisher is False
        with pytest.raises(HfHubHTTPError) as err:
            api.get_organization_overview("nobody")
        assert err.value.response.status_code == 404


@pytest.mark.parametrize("ref, which", [("refs/heads/v1", 0), ("refs/tags/v1.0.0", 0), ("refs/heads/main", 1),
                                        ("v1", 0), ("v1.0.0", 0)])
def test_full_ref_names_resolve_in_tree_resolve_and_paths_info(hub, tmp_path, ref, which):
    api, *commits = _repo(hub)
    tree = list(api.list_repo_tree(REPO, path_in_repo="build", revision=ref, repo_type="kernel", recursive=True))
    assert [f.path for f in tree if isinstance(f, RepoFile)] == ["build/torch-cpu/pkg/__init__.py"]
    info = api.get_paths_info(REPO, ["build/torch-cpu/pkg/__init__.py"], revision=ref, repo_type="kernel")
    assert info[0].path == "build/torch-cpu/pkg/__init__.py"
    local = hf_hub_download(REPO, "build/torch-cpu/pkg/__init__.py", revision=ref, repo_type="kernel",
                            endpoint=hub.url, cache_dir=tmp_path / "cache")
    assert open(local).read() == ("X = 1\n", "X = 2\n")[which]
    assert api.repo_info(REPO, repo_type="kernel", revision=ref).sha == commits[which]


def test_a_full_ref_name_of_the_wrong_kind_is_not_found(hub):
    api, *_ = _repo(hub)
    for ref in ("refs/heads/v1.0.0", "refs/tags/v1", "refs/heads/nope"):
        with pytest.raises(RevisionNotFoundError):
            list(api.list_repo_tree(REPO, revision=ref, repo_type="kernel"))
