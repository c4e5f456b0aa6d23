"""One line for a pydantic ValidationError: what the command line prints after ``error:`` and what the
reference cluster's control port answers in its 422 bodies."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from app.validation import format_validation_error

pytestmark = pytest.mark.unit


class _Topic(BaseModel):
    model_config = ConfigDict(extra="forbid")

    partitions: int = Field(ge=1)
    replication_factor: int = Field(ge=1)

    @model_validator(mode="after")
    def _fits(self) -> _Topic:
        if self.replication_factor > 3:
            raise ValueError("replication factor larger than available brokers")
        return self


class _Tree(BaseModel):
    topics: list[_Topic]


def message(model: type[BaseModel], data: object) -> str:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(data)
    return format_validation_error(caught.value)


def test_each_bad_field_by_its_dotted_path() -> None:
    assert message(_Tree, {"topics": [{"partitions": 0, "replication_factor": 1, "colour": "red"}]}) == (
        "topics.0.partitions: Input should be greater than or equal to 1; "
        "topics.0.colour: Extra inputs are not permitted"
    )


def test_an_error_of_the_whole_model_is_named_settings() -> None:
    assert message(_Topic, {"partitions": 1, "replication_factor": 4}) == (
        "settings: replication factor larger than available brokers"
    )
