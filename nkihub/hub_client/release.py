"""Release a folder as an immutable version: commit, tag and branch moves together, or none of them.

The Hub API (and so the unmodified ``huggingface_hub`` client) has no transaction over a commit, a tag
and a branch. A release is built from the three compare-and-set steps it does have, in this order:

0. Claim the version: create the tag ``nkihub-publishing-<tag>`` (never with ``exist_ok``). The Hub
   creates a tag once, so of two publishers of one version exactly one holds the claim; the other
   gets a :class:`PublishConflictError` having written nothing. The claim is deleted when the release
   ends, whatever the outcome (a publisher killed meanwhile leaves it: the conflict message says to
   delete it). Without the claim, a second publisher reading the refs after the first one's commit
   but before its tag could commit on top and would have to be rolled back.
1. Read the refs (after the claim). A tag that already exists is final: with the same content the
   release is a no-op, with other content it is a :class:`PublishConflictError` (a version never names
   two contents).
2. Commit on the target branch with ``parent_commit`` = the head read in step 1. The Hub refuses a
   stale parent (412), so of two racing publishers on one branch exactly one commits; the other gets
   the conflict with nothing written. A branch that does not exist yet is created at ``main``'s head
   first (a 409 there is the same conflict).
3. Create the tag on that commit, never with ``exist_ok``: a 409 means someone tagged the version
   without the claim (by hand, an older client), and this release is rolled back.
4. Move the following branches (``vN`` when the target is ``main``) forward to the commit: one
   compare-and-set where the Hub offers it (:func:`hub_client.client.compare_and_set_branch`), else
   delete + create.

A failure after step 2 rolls back what this release did, newest first: branches are put back, the
tag is deleted, a branch this release created is deleted, and a commit on an existing branch is undone
by a second commit restoring the parent's files (itself guarded by ``parent_commit``, so someone
else's later commit is never overwritten). The Hub's content and refs are then as they were; its
history keeps the two commits. A repo this release created is deleted again while it still holds
only its initial commit.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from . import paths as P
from .client import PushResult, compare_and_set_branch, hf_api, local_files, push_folder, remote_files, set_branch
from .digest import file_digests
from .errors import PublishConflictError

log = logging.getLogger("hub_client")


@dataclass(frozen=True)
class ReleaseResult:
    """``commit`` carries ``tag``; ``created`` is False when the Hub already had this exact release."""

    commit: str
    created: bool
    url: str


def _once(create: Callable[[], object], conflict: str) -> None:
    """Run a ref-creating call; the Hub's 409 (the ref exists) becomes :class:`PublishConflictError`."""
    from huggingface_hub.errors import HfHubHTTPError

    try:
        create()
    except HfHubHTTPError as e:
        if e.response is not None and e.response.status_code == 409:
            raise PublishConflictError(conflict) from e
        raise


def same_content(api, repo_id: str, commit: str, folder, repo_type: str, keep: Iterable[str]) -> bool:
    """True when ``commit`` holds exactly the files of ``folder`` (plus ``keep``), byte for byte."""
    published = {p: o for p, o in remote_files(api, repo_id, commit, repo_type).items() if p not in set(keep)}
    return published == {rel: file_digests(p)[1] for rel, p in local_files(folder).items()}


def _restore(api, repo_id: str, branch: str, *, undo: str, to: str, repo_type: str, tag: str) -> None:
    """Commit on ``branch`` (expected at ``undo``) the files of ``to``: the content before ``undo``."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    before, after = remote_files(api, repo_id, to, repo_type), remote_files(api, repo_id, undo, repo_type)
    with tempfile.TemporaryDirectory(prefix="nkihub-rollback-") as tmp:
        ops = [CommitOperationDelete(path_in_repo=p) for p in sorted(set(after) - set(before))]
        for p in sorted(p for p in before if after.get(p) != before[p]):
            local = api.hf_hub_download(repo_id, p, revision=to, repo_type=repo_type, cache_dir=tmp)
            ops.append(CommitOperationAdd(path_in_repo=p, path_or_fileobj=Path(local).read_bytes()))
        api.create_commit(repo_id, ops, commit_message=f"Roll back {tag} (its release failed)", revision=branch,
                          repo_type=repo_type, parent_commit=undo)


def release(folder, repo_id: str, *, tag: str, route: Callable[[dict], tuple[str, list[str]]], message: str,
            repo_type: str = "kernel", endpoint: str | None = None, token: str | bool | None = None,
            keep: Iterable[str] = (".gitattributes",),
            guard: Callable[[dict, dict], None] | None = None) -> ReleaseResult:
    """Publish ``folder`` as ``tag`` on a branch, move the following branches to it: all or nothing.

    ``route(branches)`` gets the branch -> commit map of the one refs read the whole release is
    checked against and returns ``(branch to commit on, branches to move along)``, so the choice
    (e.g. ``main`` for the newest major) and the commit's parent can never disagree. ``guard(tags,
    branches)`` (tag -> commit, branch -> commit, the same read) may raise to refuse the release
    before anything is written (e.g. a version older than one already released). ``folder`` must
    already be validated. Raises :class:`PublishConflictError` when another writer got there first;
    then nothing of this release is left on the Hub (module doc).
    """
    P.check_repo_id(repo_id)
    P.check_revision(tag)
    api = hf_api(endpoint, token)
    created_repo = not api.repo_exists(repo_id, repo_type=repo_type)
    url = str(api.create_repo(repo_id, repo_type=repo_type, exist_ok=True))
    undo: list = []  # callables, run newest first on failure
    if created_repo:
        undo.append(lambda: _drop_if_empty(api, repo_id, repo_type))
    try:
        tags = {t.name: t.target_commit for t in api.list_repo_refs(repo_id, repo_type=repo_type).tags}
        if tag in tags:  # the common no-op (or conflict) needs no claim
            return _existing(api, repo_id, tag, tags[tag], folder, repo_type, keep, url)
        claim = f"nkihub-publishing-{tag}"
        _once(lambda: api.create_tag(repo_id, tag=claim, revision="main", repo_type=repo_type,
                                     tag_message="a release of this version is under way"),
              f"{repo_id}: another publisher is releasing {tag} right now; nothing was written. (If no one is, "
              f"a killed publisher left its claim: delete tag {claim} and retry.)")
        undo.append(lambda: api.delete_tag(repo_id, tag=claim, repo_type=repo_type))
        refs = api.list_repo_refs(repo_id, repo_type=repo_type)
        tags = {t.name: t.target_commit for t in refs.tags}
        branches = {b.name: b.target_commit for b in refs.branches}
        if tag in tags:
            result = _existing(api, repo_id, tag, tags[tag], folder, repo_type, keep, url)
            api.delete_tag(repo_id, tag=claim, repo_type=repo_type)
            return result
        if guard is not None:
            guard(tags, branches)
        branch, follow = route(branches)
        for ref in (branch, *follow):
            P.check_revision(ref)
        head = branches.get(branch)
        if head is None:
            head = branches["main"]
            _once(lambda: api.create_branch(repo_id, branch=branch, revision=head, repo_type=repo_type),
                  f"{repo_id}: branch {branch} was created by another writer while publishing; nothing was "
                  "written. Retry.")
            undo.append(lambda: api.delete_branch(repo_id, branch=branch, repo_type=repo_type))
        pushed: PushResult = push_folder(folder, repo_id, branch=branch, message=message, repo_type=repo_type,
                                         endpoint=endpoint, token=token, base_commit=head, keep=keep)
        if pushed.created and branch in branches:  # a branch this release created is simply deleted
            undo.append(lambda: _restore(api, repo_id, branch, undo=pushed.commit, to=head, repo_type=repo_type,
                                         tag=tag))
        _once(lambda: api.create_tag(repo_id, tag=tag, revision=pushed.commit, repo_type=repo_type),
              f"{repo_id}: {tag} was created by another writer while publishing; this release was rolled back. "
              "A version is immutable: bump it.")
        undo.append(lambda: api.delete_tag(repo_id, tag=tag, repo_type=repo_type))
        for name in follow:
            before = branches.get(name)
            if set_branch(repo_id, name, pushed.commit, repo_type=repo_type, endpoint=endpoint, token=token):
                undo.append(_branch_back(api, repo_id, name, before, pushed.commit, repo_type))
        api.delete_tag(repo_id, tag=claim, repo_type=repo_type)
        return ReleaseResult(pushed.commit, pushed.created, url)
    except BaseException:
        for step in reversed(undo):
            try:
                step()
            except Exception as e:  # keep undoing the rest; say what could not be undone
                log.error("%s: rolling back %s left a step undone: %s", repo_id, tag, e)
        raise


def _existing(api, repo_id, tag, commit, folder, repo_type, keep, url) -> ReleaseResult:
    """A release of a version that is already tagged: a no-op with the same content, else a conflict."""
    if same_content(api, repo_id, commit, folder, repo_type, keep):
        return ReleaseResult(commit, False, url)
    raise PublishConflictError(f"{repo_id} already has {tag} (commit {commit[:12]}) with other content; a version "
                               "is immutable: bump the version")


def _branch_back(api, repo_id: str, name: str, before: str | None, ours: str, repo_type: str):
    def back():
        if before is not None and compare_and_set_branch(api, repo_id, name, before, ours, repo_type) is not None:
            return
        api.delete_branch(repo_id, branch=name, repo_type=repo_type)
        if before is not None:
            api.create_branch(repo_id, branch=name, revision=before, repo_type=repo_type)
    return back


def _drop_if_empty(api, repo_id: str, repo_type: str) -> None:
    """Delete a repo this release created, unless someone else has put content in it since."""
    refs = api.list_repo_refs(repo_id, repo_type=repo_type)
    if refs.tags or [b.name for b in refs.branches] != ["main"]:
        return
    if len(api.list_repo_commits(repo_id, repo_type=repo_type)) == 1:
        api.delete_repo(repo_id, repo_type=repo_type)
