-- The publication the relay's slot decodes: inserts of the outbox table only,
-- so updates (processed_at) and cleanup deletes never reach the relay.
-- A partitioned outbox table is published through its root
-- (publish_via_partition_root): pgoutput then sends every partition's
-- inserts as the root table's, which is the table the relay decodes.
-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = {{.PublicationLiteral}}) THEN
        IF (SELECT relkind FROM pg_class WHERE oid = to_regclass({{.QualifiedLiteral}})) = 'p' THEN
            CREATE PUBLICATION {{.Publication}} FOR TABLE {{.Table}} WITH (publish = 'insert', publish_via_partition_root = true);
        ELSE
            CREATE PUBLICATION {{.Publication}} FOR TABLE {{.Table}} WITH (publish = 'insert');
        END IF;
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
