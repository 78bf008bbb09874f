package migrations

import (
	"context"
	"fmt"
	"io/fs"
	"strings"

	"github.com/jackc/pgx/v5"
)

// publicationMigration is the migration that creates the publication and
// adds the table to it.
const publicationMigration = "00003_publication.sql"

// AddToPublication makes sure the publication exists and holds the table,
// as the migration that first created it does, whatever the table's
// migration history: a table migrated earlier for another publication (a
// relay of one table, before it read several) is added to this one. It
// is idempotent.
func AddToPublication(ctx context.Context, conn *pgx.ConnConfig, n Names) error {
	stmt, err := publicationStatement(n)
	if err != nil {
		return err
	}
	c, err := pgx.ConnectConfig(ctx, conn)
	if err != nil {
		return fmt.Errorf("connect to add %s to publication %q: %w", n.Table, n.Publication, err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	if _, err := c.Exec(ctx, stmt); err != nil {
		return fmt.Errorf("add %s to publication %q: %w", n.Table, n.Publication, err)
	}
	return nil
}

// publicationStatement is the publication migration's Up statement,
// rendered for n: one source for the migration and AddToPublication.
func publicationStatement(n Names) (string, error) {
	fsys, err := Render(n)
	if err != nil {
		return "", err
	}
	text, err := fs.ReadFile(fsys, publicationMigration)
	if err != nil {
		return "", err
	}
	_, rest, ok := strings.Cut(string(text), "-- +goose StatementBegin\n")
	stmt, _, ok2 := strings.Cut(rest, "-- +goose StatementEnd")
	if !ok || !ok2 {
		return "", fmt.Errorf("migration %s: no statement between StatementBegin and StatementEnd", publicationMigration)
	}
	return stmt, nil
}
