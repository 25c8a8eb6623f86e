import { describe, expect, it } from 'vitest';
import { postgresLocation } from './db.js';

describe('postgresLocation: where a DATABASE_URL points, for a message an operator reads', () => {
  it('names host:port/database and never the user or the password', () => {
    expect(postgresLocation('postgres://shop:s3cret@db.internal:6543/shopstream')).toBe('db.internal:6543/shopstream');
    expect(postgresLocation('postgresql://shop:s3cret@10.0.0.5/orders?sslmode=require')).toBe('10.0.0.5:5432/orders');
  });

  it('reads the database from the user when the path has none, and ?host= / ?port= as libpq does', () => {
    expect(postgresLocation('postgres://alice:pw@localhost')).toBe('localhost:5432/alice');
    expect(postgresLocation('postgres:///shop?host=/var/run/postgresql&port=5433')).toBe('/var/run/postgresql:5433/shop');
    expect(postgresLocation('postgres://[::1]:5432/shop')).toBe('[::1]:5432/shop');
  });

  it('does not quote a URL it cannot parse (it may hold a password)', () => {
    expect(postgresLocation('host=db user=u password=p')).toBe('DATABASE_URL (not a URL)');
  });
});
