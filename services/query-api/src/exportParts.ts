/**
 * `@shopstream/query-api/export`: the export's routes, and one export page without cursors over any Queryable (a
 * test counts and explains its statements). Apart from the index, whose declaration loads no express.
 */
export { exportRoutes } from './export/routes.js';
export { fetchExportPage, type ExportFilters, type PageRequest as ExportPageRequest, type PageResult as ExportPageResult } from './export/exportPage.js';
