-- The publication the relay's slot decodes: inserts of the outbox table only,
-- so updates (processed_at) and cleanup deletes never reach the relay.
-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = {{.PublicationLiteral}}) THEN
        CREATE PUBLICATION {{.Publication}} FOR TABLE {{.Table}} WITH (publish = 'insert');
    ELSIF NOT EXISTS (SELECT 1 FROM pg_publication_tables
                      WHERE pubname = {{.PublicationLiteral}}
                        AND schemaname = {{.SchemaLiteral}} AND tablename = {{.TableLiteral}}) THEN
        ALTER PUBLICATION {{.Publication}} ADD TABLE {{.Table}};
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP PUBLICATION IF EXISTS {{.Publication}};
