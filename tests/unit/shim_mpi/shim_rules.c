/* shim_rules: checks, inside a real MPI job, the substitution rules of librankmap_mpi.so
 * (docs/mpi.md): what a program sees of MPI_COMM_WORLD when the shim has replaced it.
 * It must pass with and without the shim. Every rank checks every rule; a failed rule prints
 * "rule NAME failed: ..." on stderr. Rank 0 prints "rules passed N" when every rank passed all N
 * rules, else "rules failed K" (K failures over all ranks), and the exit code is 0 either way.
 */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

static int rank_, size_, failures_;

static void rule(const char* name, int ok, const char* detail) {
  if (!ok) {
    fprintf(stderr, "rule %s failed on rank %d: %s\n", name, rank_, detail);
    ++failures_;
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  int rules = 0;

  /* Predefined attributes live on the real world only; the shim must still find them. */
  ++rules;
  int* tagUb = NULL;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tagUb, &flag);
  rule("tag_ub", flag && tagUb && *tagUb >= 32767, "MPI_TAG_UB missing or below 32767");

  /* A user attribute set on the world is found on the world. */
  ++rules;
  int key = MPI_KEYVAL_INVALID, value = 42, *got = NULL;
  MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &key, NULL);
  MPI_Comm_set_attr(MPI_COMM_WORLD, key, &value);
  flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, key, &got, &flag);
  rule("user_attr", flag && got == &value, "attribute set on MPI_COMM_WORLD not found");
  MPI_Comm_delete_attr(MPI_COMM_WORLD, key);
  MPI_Comm_free_keyval(&key);

  /* The world keeps its name. */
  ++rules;
  char name[MPI_MAX_OBJECT_NAME] = {0};
  int len = 0;
  MPI_Comm_get_name(MPI_COMM_WORLD, name, &len);
  rule("name", strcmp(name, "MPI_COMM_WORLD") == 0, name);

  /* Fortran handles: the world is Fortran's MPI_COMM_WORLD both ways (0 in Open MPI; in MPICH's
   * ABI a Fortran handle is the C handle), and that handle has the C world's ranks. */
  ++rules;
#if defined(OPEN_MPI)
  const MPI_Fint kFortranWorld = 0;
#else
  const MPI_Fint kFortranWorld = (MPI_Fint)MPI_COMM_WORLD;
#endif
  MPI_Fint f = MPI_Comm_c2f(MPI_COMM_WORLD);
  int fRank = -1;
  MPI_Comm_rank(MPI_Comm_f2c(f), &fRank);
  rule("fortran_handle", f == kFortranWorld && fRank == rank_, "MPI_Comm_c2f/f2c round trip");

  /* Comparisons: the world is identical to itself and congruent to its duplicate. */
  ++rules;
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  int ident = -1, congruent = -1;
  MPI_Comm_compare(MPI_COMM_WORLD, MPI_COMM_WORLD, &ident);
  MPI_Comm_compare(MPI_COMM_WORLD, dup, &congruent);
  rule("compare", ident == MPI_IDENT && congruent == MPI_CONGRUENT, "MPI_Comm_compare");

  /* Groups: the world's group has the world's ranks, and a duplicate's group agrees. */
  ++rules;
  MPI_Group wg, dg;
  MPI_Comm_group(MPI_COMM_WORLD, &wg);
  MPI_Comm_group(dup, &dg);
  int gRank = -1, translated = -1;
  MPI_Group_rank(wg, &gRank);
  MPI_Group_translate_ranks(wg, 1, &rank_, dg, &translated);
  rule("group", gRank == rank_ && translated == rank_, "MPI_Comm_group ranks");
  MPI_Group_free(&wg);
  MPI_Group_free(&dg);

  /* A split keyed by rank keeps the world's order. */
  ++rules;
  MPI_Comm split;
  MPI_Comm_split(MPI_COMM_WORLD, 0, rank_, &split);
  int sRank = -1;
  MPI_Comm_rank(split, &sRank);
  rule("split", sRank == rank_, "MPI_Comm_split by rank");
  MPI_Comm_free(&split);
  MPI_Comm_free(&dup);

  /* Error handlers set on the world apply to calls on the world; freeing the world is an error
   * that returns (MPI_ERRORS_RETURN) and leaves the world usable. */
  ++rules;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Errhandler eh;
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &eh);
  int sendRc = MPI_Send(&value, 1, MPI_INT, size_ + 5, 0, MPI_COMM_WORLD);
  MPI_Comm world = MPI_COMM_WORLD;
  int freeRc = MPI_Comm_free(&world);
  int after = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &after);
  rule("errhandler", eh == MPI_ERRORS_RETURN && sendRc != MPI_SUCCESS && freeRc != MPI_SUCCESS &&
                         world == MPI_COMM_WORLD && after == rank_,
       "MPI_ERRORS_RETURN on the world");
  MPI_Errhandler_free(&eh);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);

  int total = 0;
  MPI_Reduce(&failures_, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank_ == 0) {
    if (total == 0) {
      printf("rules passed %d\n", rules);
    } else {
      printf("rules failed %d\n", total);
    }
    fflush(stdout);
  }
  MPI_Finalize();
  return 0;
}
