/**
 * The library, loaded on first use. Loading it (TypeORM, pg, PGlite) takes about a third
 * of a second: `--help` and a usage error answer without it.
 */
export const library = () => import('../index.js');
