package outbox

// JSONBSize exposes jsonbSize to the external tests that compare it with
// Postgres.
var JSONBSize = jsonbSize

// ArrayLiteral exposes arrayLiteral.
var ArrayLiteral = arrayLiteral
