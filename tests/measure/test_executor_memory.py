"""The CPU live-storage tracker: counts distinct storages, frees, views, backward, exclusions."""

from __future__ import annotations

import torch

from remat.measure.memory import StorageTracker, storage_bytes, untracked


def test_counts_allocations_and_frees():
    with StorageTracker() as tracker:
        a = torch.empty(1000)  # 4000 bytes
        b = torch.empty(500, dtype=torch.float64)  # 4000 bytes
        assert tracker.current_bytes == 8000
        del a
        assert tracker.current_bytes == 4000
        c = torch.empty(250)
        assert tracker.current_bytes == 5000
        del b, c
    assert tracker.current_bytes == 0
    assert tracker.peak_bytes == 8000


def test_views_share_one_storage():
    with StorageTracker() as tracker:
        a = torch.empty(100, 10)
        views = [a[3:], a.t(), a.view(-1), a.detach()]
        assert tracker.current_bytes == 4000
        del a
        assert tracker.current_bytes == 4000  # the views keep the storage alive
        views.clear()
        assert tracker.current_bytes == 0


def test_existing_tensors_only_when_tracked():
    x = torch.empty(100)
    y = torch.empty(200)
    with StorageTracker() as tracker:
        tracker.track(x)
        assert tracker.current_bytes == 400
        z = y + 1
        assert tracker.current_bytes == 400 + 800
        del x
        assert tracker.current_bytes == 800
        del z
    assert tracker.peak_bytes == 1200


def test_backward_allocations_are_seen():
    w = torch.randn(64, 64, requires_grad=True)
    x = torch.randn(32, 64)
    w.grad = torch.zeros_like(w)
    with StorageTracker(record_events=True) as tracker:
        h = x @ w  # saved for backward: x (not tracked) and w (not tracked)
        y = torch.tanh(h)  # tanh saves its output y
        loss = y.sum()
        del h
        before = tracker.current_bytes
        loss.backward()
    act = 32 * 64 * 4
    assert before == act + 4  # y and the loss scalar
    # backward made at least the tanh gradient and the gradient of w (a transient added into w.grad)
    assert tracker.peak_bytes >= before + act
    assert any(event.delta < 0 for event in tracker.events)


def test_untracked_and_ignore():
    with StorageTracker() as tracker:
        with untracked():
            hidden = torch.empty(1000)
        a = torch.empty(10)
        tracker.ignore(a)
        assert tracker.current_bytes == 0
        b = a + 1
        assert tracker.current_bytes == 40
        del hidden, b
    assert tracker.peak_bytes == 40


def test_in_place_resize_is_counted():
    with StorageTracker() as tracker:
        a = torch.empty(10)
        torch.add(torch.zeros(5), 1, out=a[:5])
        a.resize_(1000)
        torch.mul(a, 1, out=a)
        assert tracker.current_bytes >= 4000


def test_storage_bytes_counts_distinct_storages():
    a = torch.empty(10, 10)
    b = torch.empty(5)
    assert storage_bytes(a, a[2], a.t(), b) == 400 + 20


def test_views_of_untracked_storages_are_not_new():
    w = torch.randn(64, 32)
    with StorageTracker() as tracker:
        views = [w.t(), w[1:], w.detach(), w.view(-1)]
        w.add_(1)
        assert tracker.current_bytes == 0
        ones = torch.ones(64, 1)
        y = w.t() @ ones  # only the result and the ones are new
        assert tracker.current_bytes == 32 * 4 + 64 * 4
        del views, y, ones
