"""The job state machine: every transition of spec §6 as a function over one store
transaction. `states` holds the states and the allowed moves, `queue` the one
primitive that moves a job between indexes, counts and outbox; the other modules are
one entity or verb each."""
