//! PMPI wrappers of MPI_Init and MPI_Finalize.
