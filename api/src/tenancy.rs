//! Departments, tenants, the approved GPU inventory, endpoint aliases (onboarding).
