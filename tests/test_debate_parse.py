"""Candidate-restricted answer parsing on hard cases."""
import pytest

from chorus.simulate.debate import parse_answer

L = ["A", "B", "C", "D"]
W = ["yes", "no", "maybe"]


@pytest.mark.parametrize("text,expected", [
    ("Answer: B", "B"),
    ("The answer is C.", "C"),
    ("**D**", "D"),
    ("B. Because the others are wrong.", "B"),
    ("(A) is correct", "A"),
    ("Final answer: (C)", "C"),
    ("answer: b", "B"),
    ("I think B is right at first. After review, Answer: D", "D"),
    ("I choose option C because it fits.", "C"),
    ("The right answer is **B**.", "B"),
    # long justification ending in a stray capital letter: the explicit commitment wins
    ("Answer: A\nThe reasoning covers several points, such as the role of vitamin C", "A"),
])
def test_letter_commitments(text, expected):
    assert parse_answer(text, L) == expected


@pytest.mark.parametrize("text", [
    # long justification with no commitment that ends in a stray capital letter
    "A common misconception holds that the moon is made of cheese. Most sources, including Appendix C",
    "Let me think about this. It depends on vitamin C",
    "A good question. I would need more information to decide.",
    # refusals
    "I cannot answer that question.",
    "I'm sorry, but I can't help with that.",
    # hedges
    "It is either B or C, hard to say.",
    "",
    "   ",
    None,
])
def test_letter_unparsed(text):
    assert parse_answer(text, L) is None


def test_article_A_is_not_an_answer_but_leading_A_dot_is():
    assert parse_answer("A dog is a mammal, so the best fit is B", L) == "B"
    assert parse_answer("A. A dog is a mammal.", L) == "A"


def test_only_candidates_come_out():
    assert parse_answer("Answer: E", L) is None
    assert parse_answer("Answer: E", ["A", "B"]) is None
    assert parse_answer("The answer is B", ["A", "B"]) == "B"


@pytest.mark.parametrize("text,expected", [
    ("Yes, because the sky is blue.", "yes"),
    ("Final answer: maybe", "maybe"),
    ("After weighing it up, my answer: No", "no"),
    ("The evidence is mixed. **Maybe**", "maybe"),
    ("I think so; yes.", "yes"),
])
def test_word_labels(text, expected):
    assert parse_answer(text, W) == expected


@pytest.mark.parametrize("text", [
    "There is no evidence either way, so yes and no are both defensible.",  # two labels, no commitment
    "Nobody knows. Yesterday it rained.",  # word boundaries: "Nobody", "Yesterday" are not labels
    "I cannot answer that.",
])
def test_word_unparsed(text):
    assert parse_answer(text, W) is None


def test_prose_only_commitment_without_label_is_unparsed():
    assert parse_answer("I believe the capital of France is Paris, which is option text only.", L) is None
