"""The incident lane: ``kafka-health serve`` evaluates the incident rules (1-7, 10-13) on its live view of
the cluster within a second of a change, and writes their alerts, events and webhook outbox rows in one
transaction (docs/alert-rules.md, docs/architecture.md).

- :mod:`~app.incidents.config`: its section of the settings tree (``service.incidents``);
- :mod:`~app.incidents.changes`: the fan-out of the ZooKeeper collector's ``on_change``;
- :mod:`~app.incidents.observe`: the cluster's health state from the live view, and the controller's
  history (rule 4);
- :mod:`~app.incidents.lane`: the lane itself (:class:`~app.incidents.lane.IncidentLane`).
"""
