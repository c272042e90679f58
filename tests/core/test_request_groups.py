"""Requests grouped by their masked questions' vectors (core/request_groups.py)."""

from __future__ import annotations

from core.request_groups import group_vectors


def test_close_vectors_group_and_the_largest_group_comes_first():
    a, a2, b, a3 = [1.0, 0.0], [0.99, 0.05], [0.0, 1.0], [0.95, 0.1]
    assert group_vectors([b, a, a2, a3], 0.9) == [[1, 2, 3], [0]]


def test_an_unread_request_stands_alone_and_ties_keep_the_oldest_first():
    assert group_vectors([None, [1.0, 0.0], [], [0.0, 1.0]], 0.9) == [[0], [1], [2], [3]]


def test_vectors_of_another_size_never_group():
    assert group_vectors([[1.0, 0.0], [1.0, 0.0, 0.0]], 0.5) == [[0], [1]]
