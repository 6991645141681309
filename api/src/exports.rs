//! Exports (`/api/v1/exports/…`): CSV and FOCUS answers are text; this module holds their query.
