! mpi_proof_f: the Fortran twin of mpi_proof.c (`use mpi`), for the MPI-path proof and the shim's
! unit tests. It knows nothing of rankmap; Open MPI's Fortran bindings call PMPI_* directly, so
! this program is what shows that the shim reaches Fortran.
!
! Every rank prints "rank R of N on HOST launcher L" (L: OMPI_COMM_WORLD_RANK, else PMI_RANK from
! MPICH's Hydra, -1 if neither is set).
! Rank 0 prints "check NAME VALUE" lines whose values depend on N alone (inputs depend on the
! rank; every element is checked, a wrong one aborts with exit code 3). With --bytes B it also
! times MPI_ALLREDUCE of B bytes of integers (--iters K after --warmup W untimed calls, each after
! a barrier, the slowest rank's time) and rank 0 prints "time allreduce bytes=B iters=K median_s=S".
program mpi_proof_f
  use mpi
  implicit none
  integer, parameter :: kCount = 1000, kPeriod = 13
  integer :: ierr, rank, nranks, i, j, r, hostlen, got, nargs
  integer :: inbuf(kCount), outbuf(kCount)
  integer, allocatable :: gathered(:)
  integer(kind=8) :: digest
  character(len=MPI_MAX_PROCESSOR_NAME) :: host
  character(len=32) :: launcher, arg
  integer :: bytes, iters, warmup, status(MPI_STATUS_SIZE)

  call MPI_INIT(ierr)
  call MPI_COMM_RANK(MPI_COMM_WORLD, rank, ierr)
  call MPI_COMM_SIZE(MPI_COMM_WORLD, nranks, ierr)

  bytes = 0
  iters = 5
  warmup = 1
  nargs = command_argument_count()
  i = 1
  do while (i <= nargs)
    call get_command_argument(i, arg)
    if (i + 1 > nargs) call usage()
    select case (trim(arg))
    case ('--bytes')
      call get_command_argument(i + 1, arg)
      read (arg, *, iostat=ierr) bytes
    case ('--iters')
      call get_command_argument(i + 1, arg)
      read (arg, *, iostat=ierr) iters
    case ('--warmup')
      call get_command_argument(i + 1, arg)
      read (arg, *, iostat=ierr) warmup
    case default
      call usage()
    end select
    if (ierr /= 0) call usage()
    i = i + 2
  end do

  call MPI_GET_PROCESSOR_NAME(host, hostlen, ierr)
  call get_environment_variable('OMPI_COMM_WORLD_RANK', launcher, status=ierr)
  if (ierr /= 0) call get_environment_variable('PMI_RANK', launcher, status=ierr)
  if (ierr /= 0) launcher = '-1'
  do r = 0, nranks - 1
    if (r == rank) then
      write (*, '(A,I0,A,I0,A,A,A,A)') 'rank ', rank, ' of ', nranks, ' on ', host(1:hostlen), &
          ' launcher ', trim(launcher)
      flush (6)
    end if
    call MPI_BARRIER(MPI_COMM_WORLD, ierr)
  end do

  ! Allreduce: in(j) = 7r + mod(j, 13) -> 7 n(n-1)/2 + n mod(j, 13).
  do j = 1, kCount
    inbuf(j) = 7 * rank + mod(j, kPeriod)
  end do
  call MPI_ALLREDUCE(inbuf, outbuf, kCount, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  do j = 1, kCount
    call expect('allreduce', j, outbuf(j), 7 * nranks * (nranks - 1) / 2 + nranks * mod(j, kPeriod))
  end do
  call report('allreduce', outbuf, kCount)

  ! Bcast from the last rank: 3j + n.
  do j = 1, kCount
    outbuf(j) = -1
    if (rank == nranks - 1) outbuf(j) = 3 * j + nranks
  end do
  call MPI_BCAST(outbuf, kCount, MPI_INTEGER, nranks - 1, MPI_COMM_WORLD, ierr)
  do j = 1, kCount
    call expect('bcast', j, outbuf(j), 3 * j + nranks)
  end do
  call report('bcast', outbuf, kCount)

  ! Allgather: rank r contributes r*r + 1.
  allocate (gathered(nranks))
  call MPI_ALLGATHER(rank * rank + 1, 1, MPI_INTEGER, gathered, 1, MPI_INTEGER, MPI_COMM_WORLD, ierr)
  do r = 1, nranks
    call expect('allgather', r, gathered(r), (r - 1) * (r - 1) + 1)
  end do
  call report('allgather', gathered, nranks)

  ! Ring: send r to r+1, receive r-1.
  call MPI_SENDRECV(rank, 1, MPI_INTEGER, mod(rank + 1, nranks), 7, got, 1, MPI_INTEGER, &
                    mod(rank + nranks - 1, nranks), 7, MPI_COMM_WORLD, status, ierr)
  call expect('sendrecv', 1, got, mod(rank + nranks - 1, nranks))
  call MPI_GATHER(got, 1, MPI_INTEGER, gathered, 1, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
  call report('sendrecv', gathered, nranks)
  deallocate (gathered)

  if (bytes > 0) call time_allreduce()
  flush (6)
  call MPI_FINALIZE(ierr)

contains

  subroutine usage()
    if (rank == 0) write (0, '(A)') 'usage: mpi_proof_f [--bytes N] [--iters K] [--warmup W]'
    call MPI_ABORT(MPI_COMM_WORLD, 2, ierr)
  end subroutine usage

  subroutine expect(what, idx, got_, want)
    character(len=*), intent(in) :: what
    integer, intent(in) :: idx, got_, want
    if (got_ /= want) then
      write (0, '(A,I0,A,A,A,I0,A,I0,A,I0)') 'mpi_proof_f: rank ', rank, ': ', what, '(', idx, &
          ') = ', got_, ', expected ', want
      call MPI_ABORT(MPI_COMM_WORLD, 3, ierr)
    end if
  end subroutine expect

  ! A digest that depends on every element and its position.
  subroutine report(what, values, n)
    character(len=*), intent(in) :: what
    integer, intent(in) :: n, values(n)
    integer :: k
    digest = 0
    do k = 1, n
      digest = mod(digest * 31 + int(values(k), 8) + 1000003_8, 2147483647_8)
    end do
    if (rank == 0) write (*, '(A,A,A,I0)') 'check ', what, ' ', digest
  end subroutine report

  subroutine time_allreduce()
    integer, allocatable :: a(:), b(:)
    double precision, allocatable :: times(:)
    double precision :: t0, dt, slowest, tmp, median
    integer :: count, it, k, m
    count = bytes / 4
    allocate (a(count), b(count), times(iters))
    do k = 1, count
      a(k) = rank + mod(k, 7919)
    end do
    do it = 1 - warmup, iters
      call MPI_BARRIER(MPI_COMM_WORLD, ierr)
      t0 = MPI_WTIME()
      call MPI_ALLREDUCE(a, b, count, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
      dt = MPI_WTIME() - t0
      call MPI_REDUCE(dt, slowest, 1, MPI_DOUBLE_PRECISION, MPI_MAX, 0, MPI_COMM_WORLD, ierr)
      do k = 1, count
        call expect('allreduce', k, b(k), nranks * (nranks - 1) / 2 + nranks * mod(k, 7919))
      end do
      if (it >= 1) times(it) = slowest
    end do
    if (rank == 0) then
      do k = 2, iters
        tmp = times(k)
        m = k - 1
        do while (m >= 1)
          if (times(m) <= tmp) exit
          times(m + 1) = times(m)
          m = m - 1
        end do
        times(m + 1) = tmp
      end do
      if (mod(iters, 2) == 1) then
        median = times(iters / 2 + 1)
      else
        median = 0.5d0 * (times(iters / 2) + times(iters / 2 + 1))
      end if
      write (*, '(A,I0,A,I0,A,F0.6)') 'time allreduce bytes=', bytes, ' iters=', iters, &
          ' median_s=', median
    end if
    deallocate (a, b, times)
  end subroutine time_allreduce

end program mpi_proof_f
