"""The REST API's request and response models, one module per area (every route declares its response
model; together they are the OpenAPI schema at ``/docs``). ``common`` holds what every area uses: the
error body :class:`~app.service.schemas.common.Problem` and the :class:`~app.service.schemas.common.Page`
of a paginated list."""
