"""A manifest's ``published`` section: who made the model, what it is for, under which license, and how to cite
it. The fields follow the Citation File Format (CFF 1.2.0: ``authors``, ``title``, ``doi``, ``url``,
``license``, ``keywords``, ``date-released``, ``preferred-citation``), written with underscores as the rest of the
manifest; ``mlharness manifest cite`` writes them back as CITATION.cff and BibTeX."""

from __future__ import annotations

import re
from datetime import date
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

ORCID = re.compile(r"^https://orcid\.org/\d{4}-\d{4}-\d{4}-\d{3}[\dX]$")
DOI = re.compile(r"^10\.\d{4,9}/\S+$")
URL = re.compile(r"^https?://\S+$")
# an SPDX license identifier or expression ("Apache-2.0", "MIT OR Apache-2.0", "LicenseRef-custom")
SPDX = re.compile(r"^\(?[A-Za-z0-9.+-]+\)?( (AND|OR|WITH) \(?[A-Za-z0-9.+-]+\)?)*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Person(_Strict):
    """An author: a person (``family_names``, and ``given_names``) or an entity (``name``)."""

    family_names: str | None = None
    given_names: str | None = None
    name: str | None = None
    """An organisation or team, instead of a person's names."""
    affiliation: str | None = None
    orcid: str | None = None
    """https://orcid.org/0000-0000-0000-0000"""
    email: str | None = None

    @model_validator(mode="after")
    def _named(self) -> Person:
        if not (self.family_names or self.name):
            raise ValueError("an author needs family_names (a person) or name (an organisation)")
        if self.orcid is not None and not ORCID.match(self.orcid):
            raise ValueError(f"orcid {self.orcid!r} is not https://orcid.org/NNNN-NNNN-NNNN-NNNN")
        return self

    def display(self) -> str:
        return self.name or " ".join(p for p in (self.given_names, self.family_names) if p)


class Citation(_Strict):
    """The work to cite for the model (CFF's preferred-citation): a paper, or the software itself."""

    type: Literal["article", "conference-paper", "report", "software", "thesis", "book", "generic"] = "article"
    title: str
    authors: list[Person] = Field(min_length=1)
    year: int = Field(ge=1900, le=2200)
    journal: str | None = None
    """The journal, or the conference's proceedings."""
    doi: str | None = None
    url: str | None = None

    @field_validator("doi")
    @classmethod
    def _doi(cls, v: str | None) -> str | None:
        return _check(v, DOI, "a DOI such as 10.48550/arXiv.1512.03385")

    @field_validator("url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        return _check(v, URL, "an http(s) URL")


class Published(_Strict):
    """Who made the model and how to cite it; shown by ``manifest show``, searched by ``manifest search``."""

    title: str | None = None
    """The model's full name (default: the manifest's name)."""
    authors: list[Person] = Field(min_length=1)
    domain: str | None = None
    """The field it serves: vision, language, speech, recommendation, science, ..."""
    keywords: list[str] = Field(default_factory=list)
    license: str
    """An SPDX license identifier or expression of the model's weights and code, e.g. Apache-2.0."""
    doi: str | None = None
    url: str | None = None
    """The model's home page."""
    repository: str | None = None
    """Its source repository."""
    date_released: date | None = None
    citation: Citation | None = None
    """The work to cite (a paper); without it, the model itself is cited."""

    @field_validator("license")
    @classmethod
    def _license(cls, v: str) -> str:
        return _check(v, SPDX, "an SPDX license identifier or expression such as Apache-2.0 or MIT OR Apache-2.0")

    @field_validator("doi")
    @classmethod
    def _doi(cls, v: str | None) -> str | None:
        return _check(v, DOI, "a DOI such as 10.5281/zenodo.1234567")

    @field_validator("url", "repository")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        return _check(v, URL, "an http(s) URL")


def _check(value: str | None, pattern: re.Pattern[str], expected: str) -> str | None:
    if value is not None and not pattern.match(value):
        raise ValueError(f"{value!r} is not {expected}")
    return value
